"""The manifest's database goes away: a PostgreSQL manifest's server stopped mid-ingest and
started again. Seals fail and are retried, nothing is committed to Kafka meanwhile, and once
the server is back every produced record lands exactly once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bridge.local_kafka import free_port
from tests.bridge_support import (
    end_offsets,
    make_config,
    serving,
    wait_landed,
    wait_readyz,
    with_metrics,
)
from tests.postgres_server import PostgresServer, postgres_server
from tests.reliability.support import Recorder, every_offset, scale
from tests.reliability.test_broker_faults import SteadyProducer


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[PostgresServer]:
    """A server this test may stop: the session's must stay up for everything else."""
    with postgres_server() as server:
        yield server


def test_postgresql_manifest_stops_mid_ingest_and_comes_back(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    own_postgres: PostgresServer,
    reliability: Recorder,
) -> None:
    topic = topic_factory(partitions=4)
    url = own_postgres.new_database()
    port = free_port()
    config = with_metrics(
        make_config(
            kafka, tmp_path / "data", [{"source": topic}], group=f"g-{topic}",
            storage={"manifest_url": url},
        ),
        port,
    )  # fmt: skip
    total = scale(40_000, 150_000)
    load = SteadyProducer(kafka, topic, total, rate=5_000)
    try:
        with capture_logs() as logs, serving(config):
            wait_readyz(port, lambda body: bool(body["ready"]))
            load.start()
            time.sleep(3)  # ingesting at full pace when the database goes
            own_postgres.stop()
            down_at = time.monotonic()
            time.sleep(8)
            own_postgres.start()
            back_at = time.monotonic()
            outage_s = back_at - down_at
            load.join(timeout=240)
            assert not load.is_alive() and load.errors == []
            ends = end_offsets(kafka, topic)
            wait_landed(tmp_path / "data", topic, ends, timeout_s=120, manifest_url=url)
            landed_s = time.monotonic() - back_at
    finally:
        if not _accepting(own_postgres):
            own_postgres.start()
    failed = [e for e in logs if e["event"] == "seal_failed"]
    assert failed, "no seal failed while the database was down"
    reliability.check(
        "Manifest database stops mid-ingest, returns",
        f"a PostgreSQL manifest's server stopped under a 5k records/s load, down "
        f"{outage_s:.0f} s, started again",
        tmp_path / "data",
        topic,
        every_offset(ends),
        recover_s=landed_s,
        manifest_url=url,
        failed_seals=len(failed),
    )


def _accepting(server: PostgresServer) -> bool:
    import psycopg2  # noqa: PLC0415

    try:
        psycopg2.connect(
            host="127.0.0.1", port=server.port, user="postgres", dbname="postgres"
        ).close()
    except psycopg2.OperationalError:
        return False
    return True
