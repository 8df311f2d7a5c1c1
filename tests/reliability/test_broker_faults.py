"""The broker goes away: mid-ingest (stopped, then back on the same port with the same data),
before plateau starts, and frozen when plateau stops. plateau stays up, says why it is not
ready, stops within its deadline, and once the broker is back every produced record lands
exactly once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaError, Message, Producer
from structlog.testing import capture_logs

from bridge.demo.producer import Record, produce, producer_config
from bridge.local_kafka import LocalKafka, free_port
from bridge.local_kafka.topics import create_topic
from bridge.serve import EXIT_KAFKA_UNANSWERED
from tests.bridge_support import (
    committed,
    end_offsets,
    get,
    make_config,
    plateau_command,
    running_broker,
    serve_process,
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
    check = plateau_command(
        "check", "--config", str(config_file), "--timeout", "2s", log_level=None
    )
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


def _worker_rows(data_dir: Path) -> list[list[dict[str, Any]]]:
    """The partitions each worker's status file lists now."""
    found = []
    for path in (data_dir / "run").glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            found.append(json.loads(path.read_text())["partitions"])
    return found


def _wait_status(
    data_dir: Path, check: Callable[[list[list[dict[str, Any]]]], bool], timeout_s: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check(_worker_rows(data_dir)):
            return
        time.sleep(0.2)
    raise AssertionError(f"worker status files: {_worker_rows(data_dir)}")


@pytest.mark.parametrize("workers", [1, 2])
def test_stop_while_the_broker_is_frozen(
    own_broker: LocalKafka, tmp_path: Path, reliability: Recorder, workers: int
) -> None:
    """SIGTERM while the broker is frozen (SIGSTOP: connections stay open, nothing answers):
    serve seals what it buffered and ends within shutdown_timeout and a little, naming the
    offsets it could not commit; started again, it goes on from the store's watermark, also
    where the group's committed offset counts (start_without_watermark: committed)."""
    bootstrap = own_broker.bootstrap_servers
    topic = f"frozen-at-stop-{workers}"
    group = f"g-{topic}"
    create_topic(bootstrap, topic, 2)
    # The frozen run never leaves the group: the next one waits for its session to end.
    kafka = {
        "start_without_watermark": "committed",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1500,
    }
    config_file = tmp_path / "plateau.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": bootstrap, "group_id": group, **kafka},
                "storage": {"data_dir": "data"},
                # Nothing seals before the stop: the seals at the stop have offsets to commit.
                "defaults": {"roll": {"max_age": "1h"}},
                "topics": [{"source": topic}],
                "shutdown_timeout": "5s",
                "metrics": {"listen": "127.0.0.1:0"},
            }
        )
    )
    data_dir = tmp_path / "data"
    process = serve_process(config_file, workers)
    try:
        # Each worker holds its partitions (no rebalance to seal and commit them after).
        _wait_status(
            data_dir,
            lambda files: (
                len(files) == workers
                and all(files)
                and sorted(row["partition"] for rows in files for row in rows) == [0, 1]
            ),
        )
        records = (Record(value=f"a{i}".encode(), partition=i % 2) for i in range(2_000))
        produce(bootstrap, topic, records)
        first = end_offsets(bootstrap, topic)
        _wait_status(
            data_dir,
            lambda files: all(
                row["next_offset"] >= first[row["partition"]] for rows in files for row in rows
            ),
        )
    except BaseException:
        process.kill()
        raise
    assert own_broker.pid is not None
    os.kill(own_broker.pid, signal.SIGSTOP)
    try:
        process.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
            pytest.fail(f"serve still running 30 s after SIGTERM:\n{stderr[-3000:]}")
        stop_s = time.monotonic() - stopping
    finally:
        os.kill(own_broker.pid, signal.SIGCONT)
    assert process.returncode == EXIT_KAFKA_UNANSWERED, stderr[-3000:]
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    skipped = {
        (e["topic"], e["partition"]): e["offset"]
        for e in events
        if e["event"] == "offset_commit_skipped"
    }
    assert skipped == {(topic, p): end for p, end in first.items()}, stderr[-3000:]
    wait_landed(data_dir, topic, first, timeout_s=5)  # sealed at the stop, before the commit

    # Started again with Kafka back: from the watermark, whatever the group committed.
    produce(bootstrap, topic, (Record(value=f"b{i}".encode(), partition=i % 2) for i in range(200)))
    ends = end_offsets(bootstrap, topic)
    config = make_config(bootstrap, data_dir, [{"source": topic}], group=group, kafka_extra=kafka)
    with serving(config):
        wait_landed(data_dir, topic, ends)
    assert committed(bootstrap, group, topic, 2) == ends
    reliability.check(
        f"Broker frozen at stop ({workers} worker{'s' if workers > 1 else ''})",
        "SIGTERM with records buffered and the broker frozen (SIGSTOP); started again once "
        "the broker answered",
        data_dir,
        topic,
        every_offset(ends),
        stop_s=round(stop_s, 2),
        exit_code=process.returncode,
    )
