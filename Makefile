# Everything a fresh machine needs (Python 3.11+, Java 17+, Maven) is installed by these targets.
# `make run` runs the main job on embedded defaults; `make test` runs the whole suite.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Kafka jars, the Spark connector and local broker state stay inside the checkout (git-ignored).
export PLATEAU_CACHE_DIR ?= $(CURDIR)/.cache
# Spark workers must run the same interpreter as the driver.
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
# Test processes of `make test` and `make integration` (pytest-xdist; 0: the one pytest
# process). Each runs its own Kafka broker and SparkSession and takes whole test files; much
# of the suite waits on brokers, sessions and killed processes, so two overlap well on two
# cores.
TEST_WORKERS ?= 2
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile

.PHONY: run test bench reliability setup kafka-jars spark-connector kcat lint typecheck unit integration kafka-start kafka-stop compose-check clean

run: setup
	$(BIN)/plateau demo

test: setup lint typecheck kcat
	$(BIN)/pytest $(PYTEST_PARALLEL)

setup: $(VENV)/.installed kafka-jars spark-connector

# plateau side by side with Spark Structured Streaming, quixstreams, a plain consumer and
# kcat; about 15 minutes on 2 cores. BENCH_ARGS passes options (see bench/compare_bench.py).
bench: setup $(VENV)/.bench kcat
	$(BIN)/python bench/compare_bench.py $(BENCH_ARGS)

# kcat is one of the real clients the Kafka API is tested with (tests/kafka_api/test_tools.py).
kcat:
	@command -v kcat >/dev/null || { echo "kcat is missing: installing Debian's package"; \
		apt-get update -qq && apt-get install -y -qq kcat; }

# The fault suite in its long form (24 kills, a 10-minute soak; about 20 minutes), then
# docs/reliability.md rendered from its results. `make test` runs the short form.
reliability: setup
	PLATEAU_RELIABILITY=full PLATEAU_RELIABILITY_RESULTS=$(CURDIR)/docs/reliability-results.json \
		$(BIN)/pytest -m reliability; status=$$?; \
	$(BIN)/python -m tests.reliability.report docs/reliability-results.json \
		--out docs/reliability.md; exit $$status

$(VENV)/.bench: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@

# setup.py builds the C extension (bridge/kafka_api/_record_rows.c): a change to it installs again.
$(VENV)/.installed: pyproject.toml setup.py bridge/kafka_api/_record_rows.c
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "plateau needs Python 3.11 or newer, found " + sys.version.split()[0])'
	@command -v java >/dev/null || { echo "plateau's local Kafka broker needs Java 17+ (java not on PATH)"; exit 1; }
	@command -v mvn >/dev/null || { echo "plateau fetches the Kafka jars and builds its Spark connector with Maven (mvn not on PATH)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

kafka-jars: $(VENV)/.installed
	$(BIN)/plateau --log-level WARNING kafka fetch

# The `plateau` Spark data source, a Java connector: compiled with Maven against the Spark
# in the virtualenv, into $(PLATEAU_CACHE_DIR)/spark (kept until its source or Spark changes).
spark-connector: $(VENV)/.installed
	$(BIN)/python -c 'from plateau_spark.connector_build import main; main()' >/dev/null

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed
	$(BIN)/mypy

unit: $(VENV)/.installed
	$(BIN)/pytest -m "not integration"

integration: setup
	$(BIN)/pytest -m integration $(PYTEST_PARALLEL)

# The compose stack up, records checked in the store and in the replica, the stack down
# again (needs a Docker engine with Compose v2; about 5 minutes).
compose-check: $(VENV)/.installed
	$(BIN)/python compose/check.py

kafka-start: setup
	$(BIN)/plateau kafka start

kafka-stop: $(VENV)/.installed
	$(BIN)/plateau kafka stop

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache
