"""Topics that change while plateau consumes them: partitions added, a topic deleted."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewPartitions
from structlog.testing import capture_logs

from bridge.demo.producer import Record, produce
from tests.bridge_support import end_offsets, make_config, serving, stored, wait_landed
from tests.reliability.support import Recorder, every_offset


def _grow(kafka: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka})
    for future in admin.create_partitions([NewPartitions(topic, partitions)]).values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while len(end_offsets(kafka, topic)) < partitions:
        assert time.monotonic() < deadline, "the new partitions never showed in metadata"
        time.sleep(0.2)


def test_partitions_added_while_serving_are_picked_up(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, reliability: Recorder
) -> None:
    topic = topic_factory(partitions=2)
    config = make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}")
    first = [Record(value=f"a{i}".encode(), partition=i % 2) for i in range(2000)]
    produce(kafka, topic, first)
    with serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
        _grow(kafka, topic, 4)
        grown_at = time.monotonic()
        second = [Record(value=f"b{i}".encode(), partition=i % 4) for i in range(4000)]
        produce(kafka, topic, second)
        # The consumer refreshes metadata every 10 s, then the group rebalances.
        ends = end_offsets(kafka, topic)
        wait_landed(tmp_path, topic, ends, timeout_s=90)
        picked_up_s = time.monotonic() - grown_at
    table = stored(tmp_path, topic)
    assert sorted(table.column("value").to_pylist()) == sorted(r.value for r in first + second)
    assert set(table.column("partition").to_pylist()) == {0, 1, 2, 3}
    reliability.check(
        "Partitions added while serving",
        "topic grown from 2 to 4 partitions while serve ran; 4k records over all 4",
        tmp_path,
        topic,
        every_offset(ends),
        recover_s=picked_up_s,
    )


def test_a_topic_deleted_while_consumed_leaves_the_others_running(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, reliability: Recorder
) -> None:
    doomed, kept = topic_factory(partitions=1), topic_factory(partitions=1)
    config = make_config(kafka, tmp_path, [{"source": doomed}, {"source": kept}], group=f"g-{kept}")
    produce(kafka, doomed, (Record(value=f"d{i}".encode()) for i in range(500)))
    produce(kafka, kept, (Record(value=f"k{i}".encode()) for i in range(500)))
    with capture_logs() as logs, serving(config):
        wait_landed(tmp_path, doomed, end_offsets(kafka, doomed))
        wait_landed(tmp_path, kept, end_offsets(kafka, kept))
        admin = AdminClient({"bootstrap.servers": kafka})
        for future in admin.delete_topics([doomed]).values():
            future.result(timeout=30)
        produce(kafka, kept, (Record(value=f"k{i}".encode()) for i in range(500, 1500)))
        kept_ends = end_offsets(kafka, kept)
        wait_landed(tmp_path, kept, kept_ends, timeout_s=60)
    values = stored(tmp_path, kept).column("value").to_pylist()
    assert sorted(values) == sorted(f"k{i}".encode() for i in range(1500))
    # What landed from the deleted topic stays readable.
    assert stored(tmp_path, doomed).num_rows == 500
    # Its partition was given up (sealed, committed, released) and logged as such, with
    # where the store holds it to.
    revoked = [e for e in logs if e["event"] == "partition_revoked" and e["topic"] == doomed]
    assert revoked and revoked[-1]["next_offset"] == 500, revoked
    reliability.check(
        "Topic deleted while consumed",
        "one of two topics deleted while serve consumed both; 1k more records to the other",
        tmp_path,
        kept,
        every_offset(kept_ends),
        outcome="other topic exactly once; the deleted topic's 500 stay readable",
    )
