"""The broker goes away: mid-ingest (stopped, then back on the same port with the same data)
and before plateau starts. plateau stays up, says why it is not ready, and once the broker
is back every produced record lands exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer
from structlog.testing import capture_logs

from bridge.demo.producer import Record, produce, producer_config
from bridge.local_kafka import LocalKafka
from bridge.local_kafka.topics import create_topic
from tests.bridge_support import (
    end_offsets,
    free_port,
    get,
    make_config,
    plateau_command,
    running_broker,
    serving,
    wait_landed,
    wait_readyz,
    with_metrics,
    write_config_file,
)
from tests.reliability.support import Recorder, every_offset, scale


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A broker these tests may stop: the session's must stay up for everything else."""
    with running_broker(tmp_path_factory.mktemp("kafka-faults")) as broker:
        yield broker


class SteadyProducer(threading.Thread):
    """Produces `total` records at about `rate` per second, riding out a broker outage
    (librdkafka queues and retries; idempotence keeps retries from duplicating)."""

    def __init__(self, bootstrap: str, topic: str, total: int, rate: int) -> None:
        super().__init__(name="steady-producer", daemon=True)
        self.bootstrap, self.topic, self.total, self.rate = bootstrap, topic, total, rate
        self.delivered: dict[int, set[int]] = {}
        self.errors: list[str] = []

    def _report(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        partition, offset = msg.partition(), msg.offset()
        assert partition is not None and offset is not None
        self.delivered.setdefault(partition, set()).add(offset)

    def run(self) -> None:
        producer = Producer(producer_config(self.bootstrap, **{"message.timeout.ms": 180_000}))
        chunk = max(1, self.rate // 10)
        for start in range(0, self.total, chunk):
            for i in range(start, min(start + chunk, self.total)):
                producer.produce(self.topic, value=f"r{i}".encode(), on_delivery=self._report)
            producer.poll(0)
            time.sleep(0.1)
        if producer.flush(180):
            self.errors.append("records still queued after 180 s")


def test_broker_stops_mid_ingest_and_comes_back(
    own_broker: LocalKafka, tmp_path: Path, reliability: Recorder
) -> None:
    bootstrap = own_broker.bootstrap_servers
    topic = "stops-mid-ingest"
    create_topic(bootstrap, topic, 4)
    port = free_port()
    config = with_metrics(
        make_config(bootstrap, tmp_path / "data", [{"source": topic}], group="g-mid"), port
    )
    total = scale(60_000, 200_000)
    load = SteadyProducer(bootstrap, topic, total, rate=5_000)
    with capture_logs() as logs, serving(config):
        wait_readyz(port, lambda body: bool(body["ready"]))
        load.start()
        time.sleep(3)  # ingesting at full pace when the broker goes
        own_broker.stop()
        down_at = time.monotonic()
        down = wait_readyz(port, lambda body: not body["ready"], timeout_s=90)
        assert any("worker-0:" in reason for reason in down["reasons"]), down
        assert get(port, "/healthz")[0] == 200  # down is not dead: nothing to restart
        time.sleep(max(0.0, 8 - (time.monotonic() - down_at)))
        assert own_broker.start() == bootstrap  # same port, same data
        back_at = time.monotonic()
        outage_s = back_at - down_at
        wait_readyz(port, lambda body: bool(body["ready"]), timeout_s=90)
        ready_s = time.monotonic() - back_at
        # Recovered: what Kafka held once plateau was ready again (the outage's backlog)
        # has landed. The load itself goes on for a while after that.
        wait_landed(tmp_path / "data", topic, end_offsets(bootstrap, topic), timeout_s=120)
        backlog_s = time.monotonic() - back_at
        load.join(timeout=240)
        assert not load.is_alive() and load.errors == []
        ends = end_offsets(bootstrap, topic)
        wait_landed(tmp_path / "data", topic, ends, timeout_s=120)
    assert load.delivered == {p: set(every_offset(ends)[p]) for p in ends}
    outage = [e for e in logs if e["event"] == "kafka_client_error"]
    assert outage, "the outage was never logged"
    reliability.check(
        "Broker stops mid-ingest, returns",
        f"broker stopped under a 5k records/s load, down {outage_s:.0f} s, started again "
        "on the same port and data",
        tmp_path / "data",
        topic,
        {p: load.delivered[p] for p in ends},
        recover_s=backlog_s,
        ready_again_s=round(ready_s, 1),
        outage_log_lines=len(outage),
    )


def test_broker_unreachable_at_start(
    own_broker: LocalKafka, tmp_path: Path, reliability: Recorder
) -> None:
    bootstrap = own_broker.bootstrap_servers
    topic = "down-at-start"
    create_topic(bootstrap, topic, 2)
    produced = produce(bootstrap, topic, (Record(value=f"s{i}".encode()) for i in range(5_000)))
    ends = end_offsets(bootstrap, topic)
    own_broker.stop()
    config_file = tmp_path / "plateau.yaml"
    write_config_file(config_file, bootstrap, topic, "g-start")
    check = plateau_command("check", "--config", str(config_file), log_level=None)
    assert check.returncode != 0
    assert bootstrap in check.stderr + check.stdout, check.stderr
    port = free_port()
    config = with_metrics(
        make_config(bootstrap, tmp_path / "data", [{"source": topic}], group="g-start"), port
    )
    try:
        with capture_logs() as logs, serving(config):
            down = wait_readyz(port, lambda body: bool(body["reasons"]) and not body["ready"])
            time.sleep(5)  # long enough for several reconnect attempts
            assert get(port, "/healthz")[0] == 200
            assert own_broker.start() == bootstrap
            back_at = time.monotonic()
            wait_landed(tmp_path / "data", topic, ends, timeout_s=120)
            landed_s = time.monotonic() - back_at
    finally:
        if not own_broker.running():
            own_broker.start()
    errors = [e for e in logs if e["event"] == "kafka_client_error"]
    assert errors and all(e["log_level"] == "warning" for e in errors)
    reliability.check(
        "Broker unreachable at start",
        "plateau check, then serve started with the broker down; broker started 5 s later",
        tmp_path / "data",
        topic,
        every_offset(ends),
        produced=produced,
        recover_s=landed_s,
        check_exit=check.returncode,
        not_ready_reasons=len(down["reasons"]),
        reconnect_log_lines=len(errors),
    )
