"""Shared fixtures: one real Kafka broker per test session, and helpers around it.

The broker is Apache Kafka run from its jars (bridge.local_kafka) unless the environment
chooses the apache/kafka container or a running broker (tests/kafka_backend.py). If it
cannot start, every test that needs it fails with the reason; nothing skips.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import platform
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from pyspark.sql import SparkSession

from bridge import logs
from bridge.local_kafka import LocalKafka
from bridge.local_kafka.topics import create_topic
from plateau_spark import session
from tests.bridge_support import REPO, running_broker
from tests.kafka_backend import (
    KafkaBackend,
    KafkaBackendError,
    choose_backend,
    container_broker,
)
from tests.postgres_server import PostgresServer, postgres_server
from tests.reliability.support import FULL, Recorder

logs.CACHE_LOGGERS = False  # tests that run the CLI in-process configure logging

# Fixtures whose use makes a test an integration test (selected out by -m "not integration").
_INTEGRATION_FIXTURES = {"kafka", "kafka_broker", "spark"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_backend() -> KafkaBackend:
    try:
        return choose_backend(os.environ)
    except KafkaBackendError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def kafka_broker(
    kafka_backend: KafkaBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalKafka | None]:
    """The session's broker from jars; None when the session uses another (a container or
    one already running)."""
    if kafka_backend.kind != "jars":
        yield None
        return
    with running_broker(tmp_path_factory.mktemp("kafka"), discard=True) as broker:
        yield broker


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (started on first use, about a second)."""
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The session's one local SparkSession (starting one costs seconds), plateau registered."""
    spark_session = session("local[2]")
    try:
        yield spark_session
    finally:
        spark_session.stop()


@pytest.fixture(scope="session")
def kafka(kafka_backend: KafkaBackend, kafka_broker: LocalKafka | None) -> Iterator[str]:
    """Bootstrap servers of a real Kafka broker."""
    if kafka_broker is not None:
        yield kafka_broker.bootstrap_servers
    elif kafka_backend.kind == "external":
        assert kafka_backend.bootstrap is not None
        yield kafka_backend.bootstrap
    else:
        assert kafka_backend.image is not None
        try:
            with container_broker(kafka_backend.image) as bootstrap:
                yield bootstrap
        except KafkaBackendError as exc:
            pytest.fail(str(exc), pytrace=False)


@pytest.fixture(autouse=True)
def _default_logging() -> Iterator[None]:
    """`plateau` commands called in-process configure structlog for the whole process (JSON
    on stderr); every test after them expects structlog's defaults again."""
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    """`plateau serve` run in-process with a Kafka API listener tunes the garbage collector
    for the process it owns (bridge.serve.tune_gc): what exists then is frozen out of every
    collection, and the threshold is 100,000. Left so, every later test ran under it, and
    the clients earlier tests left in reference cycles were never freed (librdkafka clients
    that went on retrying their stopped listeners in the run's log)."""
    threshold = gc.get_threshold()
    frozen = gc.get_freeze_count()
    yield
    if gc.get_freeze_count() != frozen or gc.get_threshold() != threshold:
        gc.unfreeze()
        gc.set_threshold(*threshold)


_RECORDER = Recorder()
_STARTED = time.time()


@pytest.fixture
def reliability(request: pytest.FixtureRequest) -> Iterator[Recorder]:
    """The session's reliability recorder (tests/reliability/support.py)."""
    _RECORDER.test = request.node.nodeid
    yield _RECORDER


# Rows the test processes of `pytest -n` (make test) recorded, handed to this one as each ends.
_WORKER_ROWS: list[dict[str, object]] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A test process of `pytest -n` ended: its rows join the session's."""
    _WORKER_ROWS.extend(json.loads(node.workeroutput.get("reliability_rows", "[]")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The recorded rows, for tests/reliability/report.py to render. A test process of
    `pytest -n` hands its rows to the process that started it, which writes them all."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["reliability_rows"] = json.dumps(_RECORDER.as_json())
        return
    rows = _RECORDER.as_json() + _WORKER_ROWS
    if not rows:
        return
    default = REPO / ".cache" / "reliability" / "last.json"
    target = Path(os.environ.get("PLATEAU_RELIABILITY_RESULTS", default))
    target.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "mode": "full" if FULL else "short",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_STARTED)),
        "seconds": round(time.time() - _STARTED, 1),
        "exit_status": int(exitstatus),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rows": rows,
    }
    target.write_text(json.dumps(document, indent=2) + "\n")


_topic_counter = itertools.count()


@pytest.fixture
def topic_factory(kafka: str, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Create a fresh, uniquely named topic: `topic_factory(partitions=3)`."""

    def make(partitions: int = 1, **config: str) -> str:
        base = request.node.name.replace("[", "-").replace("]", "")[:80]
        name = f"{base}-{next(_topic_counter)}-{uuid.uuid4().hex[:6]}"
        create_topic(kafka, name, partitions, config=config)
        return name

    return make
