# Everything a fresh machine needs (Python 3.11+, Java 17+, Maven) is installed by these targets.
# `make run` runs the main job on embedded defaults; `make test` runs the whole suite.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Kafka jars and local broker state stay inside the checkout (git-ignored).
export PLATEAU_CACHE_DIR ?= $(CURDIR)/.cache
# Spark workers must run the same interpreter as the driver.
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python

.PHONY: run test setup kafka-jars lint typecheck unit integration kafka-start kafka-stop clean

run: setup
	$(BIN)/plateau demo

test: setup lint typecheck
	$(BIN)/pytest

setup: $(VENV)/.installed kafka-jars

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "plateau needs Python 3.11 or newer, found " + sys.version.split()[0])'
	@command -v java >/dev/null || { echo "plateau's local Kafka broker needs Java 17+ (java not on PATH)"; exit 1; }
	@command -v mvn >/dev/null || { echo "plateau fetches the Kafka jars with Maven (mvn not on PATH)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

kafka-jars: $(VENV)/.installed
	$(BIN)/plateau --log-level WARNING kafka fetch

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed
	$(BIN)/mypy

unit: $(VENV)/.installed
	$(BIN)/pytest -m "not integration"

integration: setup
	$(BIN)/pytest -m integration

kafka-start: setup
	$(BIN)/plateau kafka start

kafka-stop: $(VENV)/.installed
	$(BIN)/plateau kafka stop

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache
