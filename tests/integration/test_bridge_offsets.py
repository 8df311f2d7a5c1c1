"""The manifest wins over Kafka's committed offsets; commits follow the seals."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from sqlalchemy import text
from structlog.testing import capture_logs

from bridge.config.models import Config
from bridge.consume import worker as worker_module
from bridge.consume.build import build_worker
from bridge.consume.client import new_consumer
from bridge.consume.state import PartitionState
from bridge.demo.producer import Record, produce
from bridge.local_kafka.topics import create_topic
from bridge.store import open_store
from plateau_core import Store
from tests.bridge_support import (
    committed,
    end_offsets,
    make_config,
    serving,
    stored,
    wait_landed,
)


def _produce(kafka: str, topic: str, start: int, count: int) -> None:
    produce(
        kafka,
        topic,
        (Record(value=f"r{i}".encode(), key=f"{i}".encode()) for i in range(start, start + count)),
    )


def _set_committed(kafka: str, group: str, offsets: dict[int, int], topic: str) -> None:
    consumer = Consumer(
        {"bootstrap.servers": kafka, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def _assert_exactly_once(tmp_path: Path, topic: str, expected: int) -> None:
    table = stored(tmp_path, topic)
    values = Counter(table.column("value").to_pylist())
    assert table.num_rows == expected, f"{table.num_rows} rows, expected {expected}"
    assert values == Counter(f"r{i}".encode() for i in range(expected))
    keys = list(
        zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
    )
    assert len(set(keys)) == len(keys)


def test_manifest_wins_when_kafka_is_behind_or_ahead(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    group = f"g-{topic}"
    config = make_config(kafka, tmp_path, [{"source": topic}], group=group)

    _produce(kafka, topic, 0, 1000)
    with serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
    first = end_offsets(kafka, topic)
    # Commits followed the seals: Kafka's committed offsets equal the watermarks.
    assert committed(kafka, group, topic, 2) == first

    # Kafka's committed offset behind the manifest: nothing is ingested twice.
    _set_committed(kafka, group, dict.fromkeys(first, 0), topic)
    _produce(kafka, topic, 1000, 500)
    with serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
    _assert_exactly_once(tmp_path, topic, 1500)

    # Kafka's committed offset ahead of the manifest: nothing is skipped.
    _produce(kafka, topic, 1500, 500)
    ahead = end_offsets(kafka, topic)
    _set_committed(kafka, group, ahead, topic)
    with serving(config):
        wait_landed(tmp_path, topic, ahead)
    _assert_exactly_once(tmp_path, topic, 2000)
    assert committed(kafka, group, topic, 2) == ahead


def test_the_group_offset_follows_the_store_from_assignment(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """A stop that could not commit (Kafka not answering) leaves the group's offset behind
    the store: at the next assignment it is moved to where the store resumes, not only
    once the partition seals again, so lag tools show no lag the store does not have."""
    topic = topic_factory(partitions=2)
    group = f"g-{topic}"
    config = make_config(kafka, tmp_path, [{"source": topic}], group=group)
    _produce(kafka, topic, 0, 400)
    with serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
    ends = end_offsets(kafka, topic)
    _set_committed(kafka, group, dict.fromkeys(ends, 0), topic)
    with serving(config):
        deadline = time.monotonic() + 60
        while committed(kafka, group, topic, 2) != ends and time.monotonic() < deadline:
            time.sleep(0.2)
        assert committed(kafka, group, topic, 2) == ends
    _assert_exactly_once(tmp_path, topic, 400)


def test_partition_without_watermark_can_start_at_the_committed_offset(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    group = f"g-{topic}"
    _produce(kafka, topic, 0, 100)
    _set_committed(kafka, group, {0: 60}, topic)
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic}],
        group=group,
        kafka_extra={"start_without_watermark": "committed"},
    )
    with serving(config):
        wait_landed(tmp_path, topic, {0: 100})
    assert stored(tmp_path, topic).column("offset").to_pylist() == list(range(60, 100))


def test_records_removed_by_kafka_retention_are_a_recorded_gap(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    config = make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}")
    _produce(kafka, topic, 0, 100)
    with serving(config):
        wait_landed(tmp_path, topic, {0: 100})
    # While plateau is down, Kafka's retention removes records it never read.
    _produce(kafka, topic, 100, 100)
    admin = AdminClient({"bootstrap.servers": kafka})
    for future in admin.delete_records([TopicPartition(topic, 0, 150)]).values():
        future.result(timeout=30)
    with serving(config):
        wait_landed(tmp_path, topic, {0: 200})
    offsets = stored(tmp_path, topic).column("offset").to_pylist()
    assert offsets == list(range(100)) + list(range(150, 200))
    with Store.open(tmp_path) as store:
        assert store.manifest.gaps(topic) == [(0, 100, 150)]


def test_a_partition_paused_then_revoked_is_fetched_again_when_assigned_back(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """librdkafka keeps a partition's pause across a revoke and a new assignment: a
    partition paused for backpressure (the disk floor here), taken by another member and
    given back, must be resumed, or it is never fetched again."""
    topic = topic_factory(partitions=2)
    produce(kafka, topic, [Record(value=b"r%d" % i, partition=i % 2) for i in range(40)])
    group = f"g-{topic}"
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic}],
        group=group,
        storage={"min_free_disk": 10**18},  # every append refused: paused for disk_full
        kafka_extra={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    )
    stop = threading.Event()
    with open_store(config) as store:
        worker = build_worker(config, store, stop)
        running = threading.Thread(target=worker.run, daemon=True)
        running.start()
        try:
            _until(
                lambda: (
                    len(worker.partitions) == 2
                    and all(s.paused_reason for s in worker.partitions.values())
                )
            )
            other = Consumer(
                {
                    "bootstrap.servers": kafka,
                    "group.id": group,
                    "partition.assignment.strategy": "cooperative-sticky",
                    "session.timeout.ms": 6000,
                }
            )
            taken: list[int] = []

            def assigned(consumer: Consumer, parts: list[TopicPartition]) -> None:
                taken.extend(p.partition for p in parts)
                consumer.incremental_assign(parts)
                consumer.pause(parts)

            other.subscribe([topic], on_assign=assigned)

            def took() -> bool:
                other.poll(0.1)
                return bool(taken)

            _until(took)
            other.close()
            _until(lambda: len(worker.partitions) == 2)
            worker.writer._disk.floor_bytes = 0  # room on the disk again
            _until(lambda: _landed(store, topic) == {0: 20, 1: 20}, timeout_s=40)
        finally:
            stop.set()
            running.join(60)


def _landed(store: Store, topic: str) -> dict[int, int]:
    return {s.partition: s.next_offset for s in store.spans(topic)}


def _until(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_topic_created_again_behind_the_store_is_said_loudly(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """A source topic deleted and created again starts its offsets over, below what the
    store holds of it: its first records take offsets the store has. Not silently."""
    topic = topic_factory(partitions=1)
    config = make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}")
    produce(kafka, topic, [Record(value=b"old-%d" % i, partition=0) for i in range(30)])
    with serving(config):
        wait_landed(tmp_path, topic, {0: 30})
    _recreate(kafka, topic)
    produce(kafka, topic, [Record(value=b"new-%d" % i, partition=0) for i in range(10)])
    stop = threading.Event()
    with open_store(config) as store, capture_logs() as logs:
        worker = build_worker(config, store, stop)
        running = threading.Thread(target=worker.run, daemon=True)
        running.start()
        try:
            _until(lambda: any(e["event"] == "source_behind_store" for e in logs))
        finally:
            stop.set()
            running.join(60)
    (event,) = [e for e in logs if e["event"] == "source_behind_store"]
    assert (event["topic"], event["next_offset"], event["latest_available"]) == (topic, 30, 10)


def test_a_partition_back_from_another_node_starts_where_that_node_left_it(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """Stores on two nodes, start_without_watermark: committed. A partition that goes to
    node B and comes back to A continues at B's committed offset, not at A's older
    watermark: the stores hold disjoint offset ranges."""
    topic = topic_factory(partitions=1)
    group = f"g-{topic}"
    configs = [
        make_config(
            kafka,
            tmp_path / node,
            [{"source": topic}],
            group=group,
            kafka_extra={"start_without_watermark": "committed"},
        )
        for node in ("a", "b")
    ]
    node_a, node_b = configs
    for config, start in ((node_a, 0), (node_b, 100), (node_a, 200)):
        produce(
            kafka, topic, [Record(value=b"r%d" % i, partition=0) for i in range(start, start + 100)]
        )
        with serving(config):
            wait_landed(config.storage.data_dir, topic, {0: start + 100})
    held_a = set(stored(tmp_path / "a", topic).column("offset").to_pylist())
    held_b = set(stored(tmp_path / "b", topic).column("offset").to_pylist())
    assert held_a == set(range(100)) | set(range(200, 300))
    assert held_b == set(range(100, 200))


def test_seals_of_a_lost_partition_are_not_committed(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """A partition lost (its session expired) belongs to another member: seals of it that
    finish afterwards are not committed, which could move the group's offset back."""
    topic = topic_factory(partitions=2)
    config = make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}")
    committed_here: list[list[TopicPartition]] = []

    class Recorder:
        def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
            committed_here.append(offsets)

    with open_store(config) as store:
        worker = build_worker(config, store, threading.Event(), consumer=lambda _: Recorder())  # type: ignore[arg-type,return-value]
        try:
            plateau_topic = worker._routes.route(topic).plateau_topic
            worker.partitions[(topic, 0)] = PartitionState(plateau_topic, 0)
            worker._sealed.put((plateau_topic, 0, 10))  # owned
            worker._sealed.put((plateau_topic, 1, 20))  # lost meanwhile
            worker._commit_sealed()
        finally:
            worker.writer.close()
    assert [[(tp.partition, tp.offset) for tp in c] for c in committed_here] == [[(0, 10)]]


@pytest.mark.parametrize("new_records", ["after_the_fetch", "before_the_fetch"])
def test_a_topic_created_again_while_consumed_is_said_loudly(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    new_records: str,
) -> None:
    """Deleted and created again between two metadata refreshes, the topic is never
    revoked. after_the_fetch: the consumer's fetch at the watermark is out of range and
    librdkafka starts the partition over at its beginning, handing out offsets the store
    holds. before_the_fetch: the new topic already holds records at the watermark when the
    worker fetches there (its partition was paused meanwhile), so the fetch just goes on;
    the changed topic id shows it. Either way the records below the watermark are not read,
    as at assignment, and not silently."""
    monkeypatch.setattr(worker_module, "TOPIC_ID_CHECK_S", 1.0)
    topic = topic_factory(partitions=1)
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic}],
        group=f"g-{topic}",
        # No refresh in between: it would see the topic gone and hand the partition back.
        kafka_extra={"topic.metadata.refresh.interval.ms": 300_000},
    )
    produce(kafka, topic, [Record(value=b"old-%d" % i, partition=0) for i in range(30)])
    stop = threading.Event()
    new = [Record(value=b"new-%d" % i, partition=0) for i in range(40)]
    with open_store(config) as store, capture_logs() as logs:
        worker = build_worker(config, store, stop)
        running = threading.Thread(target=worker.run, daemon=True)
        running.start()
        try:
            _until(lambda: _landed(store, topic) == {0: 30})
            if new_records == "before_the_fetch":
                worker.writer._disk.floor_bytes = 10**18  # every append refused: paused
                produce(kafka, topic, [Record(value=b"old-30", partition=0)])
                _until(lambda: any(s.paused_reason for s in worker.partitions.values()))
                _recreate(kafka, topic)
                produce(kafka, topic, new)
                worker.writer._disk.floor_bytes = 0
            else:
                _recreate(kafka, topic)
                produce(kafka, topic, new)
            _until(
                lambda: (
                    _landed(store, topic) == {0: 40}
                    and any(e["event"] == "source_behind_store" for e in logs)
                )
            )
        finally:
            stop.set()
            running.join(60)
    (event,) = [e for e in logs if e["event"] == "source_behind_store"]
    assert event["log_level"] == "error"
    assert (event["topic"], event["next_offset"]) == (topic, 30)
    if new_records == "before_the_fetch":
        assert event["recorded_topic_id"] != event["topic_id"]
    values = stored(tmp_path, topic).column("value").to_pylist()
    assert values == [b"old-%d" % i for i in range(30)] + [b"new-%d" % i for i in range(30, 40)]
    # The new topic's id is recorded: the next start does not say it again.
    produce(kafka, topic, [Record(value=b"new-%d" % i, partition=0) for i in range(40, 45)])
    logs, errors = _run_until_landed(config, topic, {0: 45})
    assert [e for e in logs if e["event"] == "source_behind_store"] == []
    assert errors == 0


def _recreate(kafka: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.delete_topics([topic])[topic].result(30)
    _until(lambda: topic not in admin.list_topics(timeout=10).topics)
    deadline = time.monotonic() + 30
    while True:  # the deletion finishes in the background
        try:
            create_topic(kafka, topic, 1)
            return
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.2)


def test_records_removed_by_retention_while_consumed_are_a_recorded_gap(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """Kafka's retention removes records while the worker is behind them (paused here):
    librdkafka moves the fetch on to the earliest offset left. The gap is recorded and
    logged as it is when found at assignment."""
    topic = topic_factory(partitions=1)
    config = make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}")
    _produce(kafka, topic, 0, 100)
    stop = threading.Event()
    with open_store(config) as store, capture_logs() as logs:
        worker = build_worker(config, store, stop)
        running = threading.Thread(target=worker.run, daemon=True)
        running.start()
        try:
            _until(lambda: _landed(store, topic) == {0: 100})
            worker.writer._disk.floor_bytes = 10**18  # every append refused: paused
            _produce(kafka, topic, 100, 100)
            _until(lambda: any(s.paused_reason for s in worker.partitions.values()))
            admin = AdminClient({"bootstrap.servers": kafka})
            for future in admin.delete_records([TopicPartition(topic, 0, 150)]).values():
                future.result(timeout=30)
            worker.writer._disk.floor_bytes = 0
            _until(lambda: _landed(store, topic) == {0: 200})
            gaps = store.manifest.gaps(topic)
        finally:
            stop.set()
            running.join(60)
    assert gaps == [(0, 100, 150)]
    (event,) = [e for e in logs if e["event"] == "offset_gap"]
    assert (event["next_offset"], event["earliest_available"], event["missing"]) == (100, 150, 50)
    offsets = stored(tmp_path, topic).column("offset").to_pylist()
    assert offsets == list(range(100)) + list(range(150, 200))


@pytest.mark.parametrize("last_records", ["after_the_reset", "before_the_reset"])
def test_records_kafka_still_has_past_a_retention_gap_land_with_auto_offset_reset_latest(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, last_records: str
) -> None:
    """auto_offset_reset: latest is for partitions never stored. When retention removes
    records the worker is behind on, librdkafka would reset the fetch to the partition's
    end: the records Kafka still has after the removed ones land, and only the removed
    ones are a gap.

    before_the_reset: no record follows the reset, so only the consumer's position shows
    the jump to the end; and the fetches from there wait 5 s for records, so for that long
    librdkafka's cached log start is the one from before the reset, not Kafka's."""
    topic = topic_factory(partitions=1)
    group = f"g-{topic}"
    _produce(kafka, topic, 0, 100)
    earliest = make_config(kafka, tmp_path, [{"source": topic}], group=group)
    _run_until_landed(earliest, topic, {0: 100})
    extra = {"auto_offset_reset": "latest"}
    if last_records == "before_the_reset":
        extra["fetch.wait.max.ms"] = "5000"
    config = make_config(kafka, tmp_path, [{"source": topic}], group=group, kafka_extra=extra)
    stop = threading.Event()
    with open_store(config) as store, capture_logs():
        worker = build_worker(config, store, stop)
        running = threading.Thread(target=worker.run, daemon=True)
        running.start()
        try:
            _until(lambda: bool(worker.partitions))
            worker.writer._disk.floor_bytes = 10**18  # every append refused: paused
            _produce(kafka, topic, 100, 100)
            _until(lambda: any(s.paused_reason for s in worker.partitions.values()))
            admin = AdminClient({"bootstrap.servers": kafka})
            for future in admin.delete_records([TopicPartition(topic, 0, 150)]).values():
                future.result(timeout=30)
            if last_records == "before_the_reset":
                _produce(kafka, topic, 200, 10)
            worker.writer._disk.floor_bytes = 0
            if last_records == "after_the_reset":
                _produce(kafka, topic, 200, 10)
            _until(lambda: _landed(store, topic) == {0: 210})
            gaps = store.manifest.gaps(topic)
        finally:
            stop.set()
            running.join(60)
    assert gaps == [(0, 100, 150)]
    offsets = stored(tmp_path, topic).column("offset").to_pylist()
    assert offsets == list(range(100)) + list(range(150, 210))


def test_the_consumer_group_protocol_from_the_passthrough_consumes(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """group.protocol: consumer (KIP-848) assigns on the broker, incrementally too: plateau
    does not set the client-side assignor that protocol refuses."""
    topic = topic_factory(partitions=2)
    group = f"g-{topic}"
    produce(kafka, topic, [Record(value=b"r%d" % i, partition=i % 2) for i in range(20)])
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic}],
        group=group,
        kafka_extra={"group.protocol": "consumer"},
    )
    with serving(config):
        wait_landed(tmp_path, topic, {0: 10, 1: 10}, timeout_s=30)
    assert committed(kafka, group, topic, 2) == {0: 10, 1: 10}


def _topic_id(kafka: str, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": kafka})
    found = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    return str(found.topic_id)


def _run_until_landed(
    config: Config, plateau_topic: str, offsets: dict[int, int]
) -> tuple[list[dict[str, Any]], float]:
    """One worker from start until the store holds `offsets`: its log events and its
    plateau_errors_total{kind="source_behind_store"}."""
    stop = threading.Event()
    with open_store(config) as store, capture_logs() as logs:
        worker = build_worker(config, store, stop)
        running = threading.Thread(target=worker.run, daemon=True)
        running.start()
        try:
            _until(lambda: _landed(store, plateau_topic) == offsets)
        finally:
            stop.set()
            running.join(60)
    return logs, worker.telemetry.counter("errors", ("source_behind_store",))


def test_a_topic_created_again_while_stopped_is_said_loudly(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """Deleted and created again while plateau was stopped, the new topic holding more
    records than the store by the time it starts: its offsets cannot be told from the old
    topic's, its topic id can. Said once, and its records below the watermark are not read,
    as when the new topic is behind the store."""
    topic = topic_factory(partitions=1)
    plateau_topic = f"r-{topic}"
    config = make_config(
        kafka,
        tmp_path,
        [{"source": f"regex:{re.escape(topic)}", "name": "r-{source}"}],
        group=f"g-{topic}",
    )
    produce(kafka, topic, [Record(value=b"old-%d" % i, partition=0) for i in range(30)])
    _run_until_landed(config, plateau_topic, {0: 30})
    old_id = _topic_id(kafka, topic)
    _recreate(kafka, topic)
    new_id = _topic_id(kafka, topic)
    assert new_id != old_id
    produce(kafka, topic, [Record(value=b"new-%d" % i, partition=0) for i in range(40)])

    logs, errors = _run_until_landed(config, plateau_topic, {0: 40})
    (event,) = [e for e in logs if e["event"] == "source_behind_store"]
    assert event["log_level"] == "error"
    assert (event["topic"], event["partition"], event["next_offset"]) == (topic, 0, 30)
    assert (event["recorded_topic_id"], event["topic_id"]) == (old_id, new_id)
    assert errors == 1
    values = stored(tmp_path, plateau_topic).column("value").to_pylist()
    assert values == [b"old-%d" % i for i in range(30)] + [b"new-%d" % i for i in range(30, 40)]

    # The new topic's id is recorded: the next start does not say it again.
    produce(kafka, topic, [Record(value=b"new-%d" % i, partition=0) for i in range(40, 45)])
    logs, errors = _run_until_landed(config, plateau_topic, {0: 45})
    assert [e for e in logs if e["event"] == "source_behind_store"] == []
    assert errors == 0
    # A manifest from before topic ids were recorded takes the current one, without an alarm.
    with open_store(config) as store, store.manifest.engine.begin() as conn:
        conn.execute(text("DELETE FROM source_topics"))
    produce(kafka, topic, [Record(value=b"new-%d" % i, partition=0) for i in range(45, 50)])
    logs, errors = _run_until_landed(config, plateau_topic, {0: 50})
    assert [e for e in logs if e["event"] == "source_behind_store"] == []
    assert errors == 0
    with open_store(config) as store:
        assert store.manifest.source_topic(plateau_topic, 0) == (topic, new_id)


class _Stalling:
    """A worker's real consumer whose `consume` sleeps `stall_s` once after `stall` is set,
    as a worker stuck in a long pause would (past max.poll.interval.ms)."""

    def __init__(self, consumer: Consumer, stall_s: float) -> None:
        self._consumer = consumer
        self.stall = threading.Event()
        self.stalled = threading.Event()
        self._stall_s = stall_s

    def consume(self, num_messages: int, timeout: float) -> Any:
        messages = self._consumer.consume(num_messages, timeout=timeout)
        if messages and self.stall.is_set() and not self.stalled.is_set():
            time.sleep(self._stall_s)  # these messages are appended after the group let go
            self.stalled.set()
        return messages

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def test_partitions_lost_by_a_stalled_worker_land_exactly_once(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """A worker that does not poll within max.poll.interval.ms loses its partitions: the
    group takes them back, so nothing of them is sealed or committed from its buffers any
    more, and once assigned again they go on from the store's watermark. Every record lands
    once, and the loss is logged with its offsets."""
    topic = topic_factory(partitions=2)
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic}],
        group=f"g-{topic}",
        # Records appended just before the loss are still buffered when it comes.
        roll={"max_age": "3s"},
        kafka_extra={
            "session.timeout.ms": 6000,
            "max.poll.interval.ms": 6000,
            "heartbeat.interval.ms": 500,
        },
    )
    _produce(kafka, topic, 0, 200)
    stop = threading.Event()
    made: list[_Stalling] = []

    def stalling(callbacks: Any) -> Any:
        made.append(_Stalling(new_consumer(config, "plateau-worker-0", callbacks), 9.0))
        return made[-1]

    with open_store(config) as store, capture_logs() as logs:
        worker = build_worker(config, store, stop, consumer=stalling)
        running = threading.Thread(target=worker.run, daemon=True)
        running.start()
        try:
            _until(lambda: sum(_landed(store, topic).values()) == 200)
            made[0].stall.set()
            _produce(kafka, topic, 200, 200)
            _until(made[0].stalled.is_set)
            _produce(kafka, topic, 400, 200)
            _until(lambda: sum(_landed(store, topic).values()) == 600, timeout_s=60)
        finally:
            stop.set()
            running.join(60)
    _assert_exactly_once(tmp_path, topic, 600)
    lost = [e for e in logs if e["event"] == "partition_lost" and e["topic"] == topic]
    assert sorted(e["partition"] for e in lost) == [0, 1], lost
    for event in lost:
        # What the worker had appended reached past what was sealed: the buffer it dropped.
        assert event["appended_to"] >= event["next_offset"] >= 0, event
    assert sum(e["appended_to"] - e["next_offset"] for e in lost) > 0, lost
    # Each partition assigned at the start and again after the loss.
    assigned = Counter(
        e["partition"] for e in logs if e["event"] == "partition_assigned" and e["topic"] == topic
    )
    assert min(assigned[0], assigned[1]) >= 2, assigned
