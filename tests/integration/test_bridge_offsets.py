"""The manifest wins over Kafka's committed offsets; commits follow the seals."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from bridge.demo.producer import Record, produce
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
