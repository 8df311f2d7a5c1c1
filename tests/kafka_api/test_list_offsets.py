"""ListOffsets, asked by clients nobody here wrote (librdkafka's AdminClient, Apache Kafka's
kafka-get-offsets tool) and by hand for what they never send: a partition's start and end,
the first offset at or after a time, the record with the largest timestamp."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.errors import ErrorCode

from bridge.kafka_api.offsets import LATEST, LATEST_TIERED
from tests.kafka_api.support import RawClient, api_config, listening, stored
from tests.kafka_api.test_security import allowlisted, limited_admin, refusal
from tests.kafka_api.test_tools import java_tool

pytestmark = pytest.mark.integration

LIST_OFFSETS = 2
BASE = 1_700_000_000_000
# Not in time order, as producers may stamp them: offsets 0..5.
STAMPS = [BASE + 1, BASE + 5, BASE + 2, BASE + 9, BASE + 3, BASE + 9]


def slow_seals(tmp_path: Path) -> Any:
    """Partitions that seal only when asked: a lookup meets records not sealed yet."""
    topic = {"name": "events", "partitions": 2, "roll": {"max_age": "1h"}}
    return api_config(tmp_path / "store", [topic])


def produce(bootstrap: str, topic: str, partition: int, stamps: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    failed: list[KafkaError] = []
    for i, stamp in enumerate(stamps):
        producer.produce(
            topic,
            value=b"v%d" % i,
            partition=partition,
            timestamp=stamp,
            on_delivery=lambda err, _msg: failed.append(err) if err else None,
        )
        producer.flush(15)  # one batch each: each record's own stamp
    assert producer.flush(15) == 0
    assert not failed, failed


def listed(bootstrap: str, asked: dict[TopicPartition, Any]) -> dict[int, tuple[int, int]]:
    """(offset, timestamp) by partition, from librdkafka's AdminClient."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    answers = admin.list_offsets(asked, request_timeout=20)
    found = {}
    for tp, future in answers.items():
        info = future.result(20)
        found[tp.partition] = (info.offset, info.timestamp)
    return found


def one(bootstrap: str, spec: Any, partition: int = 0) -> tuple[int, int]:
    return listed(bootstrap, {TopicPartition("events", partition): spec})[partition]


def test_start_end_and_times_of_records_not_sealed_yet(tmp_path: Path) -> None:
    """Every answer is exact while the records are still only in the journal: a time
    lookup seals the partition first, and the store then holds them."""
    config = slow_seals(tmp_path)
    with listening(config) as (_server, bootstrap):
        produce(bootstrap, "events", 0, STAMPS)
        assert one(bootstrap, OffsetSpec.latest()) == (6, -1)
        assert one(bootstrap, OffsetSpec.earliest())[0] == 0
        assert one(bootstrap, OffsetSpec.latest(), partition=1) == (0, -1)
        assert stored(tmp_path / "store", "events").num_rows == 0  # nothing sealed yet
        # The first offset at or after each time, in offset order (Kafka's rule).
        assert one(bootstrap, OffsetSpec.for_timestamp(BASE + 4)) == (1, BASE + 5)
        assert stored(tmp_path / "store", "events").num_rows == 6
        assert one(bootstrap, OffsetSpec.for_timestamp(BASE)) == (0, BASE + 1)
        assert one(bootstrap, OffsetSpec.for_timestamp(BASE + 6)) == (3, BASE + 9)
        assert one(bootstrap, OffsetSpec.for_timestamp(BASE + 10))[0] == -1
        # The largest timestamp, at the first record holding it.
        assert one(bootstrap, OffsetSpec.max_timestamp()) == (3, BASE + 9)
        # An empty partition has no record at any time.
        assert one(bootstrap, OffsetSpec.max_timestamp(), partition=1)[0] == -1
        assert one(bootstrap, OffsetSpec.for_timestamp(BASE), partition=1)[0] == -1


def test_lookups_across_sealed_and_unsealed_records_and_retention(tmp_path: Path) -> None:
    config = slow_seals(tmp_path)
    with listening(config) as (server, bootstrap):
        produce(bootstrap, "events", 0, STAMPS)
        assert one(bootstrap, OffsetSpec.for_timestamp(BASE + 2)) == (1, BASE + 5)  # seals 0-5
        produce(bootstrap, "events", 0, [BASE + 20, BASE + 30, BASE + 25])  # offsets 6-8
        # Found among the sealed records: those not sealed yet come after, and stay so.
        assert one(bootstrap, OffsetSpec.for_timestamp(BASE + 2)) == (1, BASE + 5)
        assert stored(tmp_path / "store", "events").num_rows == 6
        # Not among them: the partition seals, and the answer is one of the new records.
        assert one(bootstrap, OffsetSpec.for_timestamp(BASE + 21)) == (7, BASE + 30)
        assert stored(tmp_path / "store", "events").num_rows == 9
        assert one(bootstrap, OffsetSpec.max_timestamp()) == (7, BASE + 30)
        assert one(bootstrap, OffsetSpec.latest()) == (9, -1)
        # Retention took the first segment: the partition starts where the next does.
        manifest = server.sink.store.manifest
        first = manifest.segments("events", partitions=[0])[0]
        assert (first.start_offset, first.end_offset) == (0, 6)
        manifest.mark_deleting([first.id])
        manifest.remove([first.id])
        assert one(bootstrap, OffsetSpec.earliest())[0] == 6
        assert one(bootstrap, OffsetSpec.for_timestamp(BASE))[0] == 6
        assert one(bootstrap, OffsetSpec.latest()) == (9, -1)


def test_kafka_get_offsets(tmp_path: Path) -> None:
    """Apache Kafka's own tool (GetOffsetShell, the Java admin client)."""
    config = slow_seals(tmp_path)
    with listening(config) as (_server, bootstrap):
        produce(bootstrap, "events", 1, STAMPS)

        def offsets(*args: str) -> dict[str, int]:
            done = java_tool(
                "org.apache.kafka.tools.GetOffsetShell",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                "events",
                *args,
            )
            assert done.returncode == 0, done.stderr
            return {
                m[1]: int(m[2]) for m in re.finditer(r"^(events:\d+):(-?\d+)$", done.stdout, re.M)
            }

        assert offsets() == {"events:0": 0, "events:1": 6}
        assert offsets("--time", "earliest") == {"events:0": 0, "events:1": 0}
        # A partition without a record at or after the time is left out.
        assert offsets("--time", str(BASE + 6)) == {"events:1": 3}
        assert offsets("--time", "max-timestamp") == {"events:1": 3}


def test_what_clients_never_send(tmp_path: Path) -> None:
    """Answers per partition, as Kafka gives them: the request's other partitions are
    answered as usual."""
    config = api_config(tmp_path / "store")
    with listening(config) as (_server, bootstrap):
        produce(bootstrap, "events", 0, STAMPS[:2])
        client = RawClient(bootstrap)
        try:

            def ask(partitions: list[dict[str, int]], topic: str = "events") -> list[Any]:
                body = client.call(
                    LIST_OFFSETS,
                    7,
                    {
                        "replica_id": -1,
                        "isolation_level": 0,
                        "topics": [{"name": topic, "partitions": partitions}],
                    },
                )
                return list(body.topics[0].partitions)

            latest = {"partition_index": 0, "timestamp": LATEST}
            dup = ask([latest, {"partition_index": 1, "timestamp": LATEST}, latest])
            assert [p.error_code for p in dup] == [
                ErrorCode.invalid_request,
                ErrorCode.none,
                ErrorCode.invalid_request,
            ]
            [later_epoch] = ask([{**latest, "current_leader_epoch": 1}])
            assert later_epoch.error_code == ErrorCode.unknown_leader_epoch
            [tiered] = ask([{"partition_index": 0, "timestamp": LATEST_TIERED}])
            assert (tiered.error_code, tiered.offset) == (ErrorCode.none, -1)
            [beyond] = ask([{"partition_index": 2, "timestamp": LATEST}])
            assert beyond.error_code == ErrorCode.unknown_topic_or_partition
            [nobody] = ask([latest], topic="nobody")
            assert nobody.error_code == ErrorCode.unknown_topic_or_partition
            # v1, the oldest listed: no isolation level, no leader epoch.
            old = client.call(
                LIST_OFFSETS,
                1,
                {"replica_id": -1, "topics": [{"name": "events", "partitions": [latest]}]},
            )
            assert (old.topics[0].partitions[0].error_code, old.topics[0].partitions[0].offset) == (
                ErrorCode.none,
                2,
            )
        finally:
            client.close()


def test_a_user_lists_the_offsets_of_its_own_topics_only(tmp_path: Path) -> None:
    with listening(allowlisted(tmp_path)) as (_server, bootstrap):
        admin = limited_admin(bootstrap)  # held: its futures end with it
        answers = admin.list_offsets(
            {TopicPartition(t, 0): OffsetSpec.latest() for t in ("app-logs", "events")},
            request_timeout=15,
        )
        by_topic = {tp.topic: future for tp, future in answers.items()}
        assert by_topic["app-logs"].result(15).offset == 0
        assert refusal(by_topic["events"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
