"""librdkafka (confluent-kafka's Producer) writing to plateau's Kafka API, read back from the
store: every acknowledged record exactly once, with its key, value, headers and timestamp."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from plateau_core.journal_codec import read_file
from plateau_core.journal_files import JOURNAL_DIR, SUFFIX
from plateau_core.lazy import materialize
from tests.kafka_api.support import api_config, listening, stored

N = 3000


def produce(bootstrap: str, topic: str, settings: dict[str, Any], count: int = N) -> list[Message]:
    delivered: list[Message] = []
    failed: list[KafkaError] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        (failed.append(err) if err is not None else delivered.append(msg))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **settings})
    for i in range(count):
        producer.produce(
            topic,
            key=b"key-%d" % i,
            value=b"value-%d" % i,
            headers=[("n", str(i).encode())],
            timestamp=1_700_000_000_000 + i,
            on_delivery=report,
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert failed == []
    return delivered


def check_exactly_once(table: Any, delivered: list[Message]) -> None:
    rows = table.to_pylist()
    by_key = {r["key"]: r for r in rows}
    assert len(rows) == len(by_key) == len(delivered)
    for msg in delivered:
        key = msg.key()
        assert key is not None
        i = int(key.split(b"-")[1])
        row = by_key[key]
        assert row["value"] == msg.value() == b"value-%d" % i
        assert row["offset"] == msg.offset()
        assert row["headers"] == [{"key": "n", "value": str(i).encode()}]
        assert int(row["timestamp"].timestamp() * 1000) == 1_700_000_000_000 + i


@pytest.mark.parametrize(
    "settings",
    [
        {"acks": "all", "enable.idempotence": True},
        {"acks": "all", "enable.idempotence": False},
        {"acks": "1"},
    ],
    ids=["idempotent", "acks-all", "acks-1"],
)
def test_acknowledged_records_land_exactly_once(tmp_path: Path, settings: dict[str, Any]) -> None:
    config = api_config(tmp_path / "store")
    with listening(config) as (_server, bootstrap):
        delivered = produce(bootstrap, "events", settings)
    table = stored(tmp_path / "store", "events")
    check_exactly_once(table, delivered)
    # Offsets are contiguous per partition, from 0.
    for partition in (0, 1):
        offsets = sorted(m.offset() for m in delivered if m.partition() == partition)
        assert offsets == list(range(len(offsets)))


def test_acks_all_answers_only_sealed_records_with_segment_durability(tmp_path: Path) -> None:
    """With durability: segment, a delivery report means the records are in the manifest
    already: the store reads them while the listener still runs."""
    config = api_config(tmp_path / "store", durability="segment")
    with listening(config) as (_server, bootstrap):
        delivered = produce(bootstrap, "events", {"acks": "all"}, count=500)
        table = stored(tmp_path / "store", "events")
        assert table.num_rows == len(delivered)


def journaled_keys(data_dir: Path) -> list[bytes]:
    """The keys of every record in the journal's files, read as a restart would."""
    keys: list[bytes] = []
    for path in sorted((data_dir / JOURNAL_DIR).glob(f"*{SUFFIX}")):
        read = read_file(pa.py_buffer(path.read_bytes()), path.name)
        for group in read.groups:
            for append in group.appends:
                for batch in materialize(append.batches):
                    keys += batch.column("key").to_pylist()
    return keys


def test_acks_all_answers_only_journaled_records(tmp_path: Path) -> None:
    """With the journal (the default), a delivery report means the records are in its synced
    files already; they become queryable once sealed, within the topic's roll.max_age."""
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 2, "roll": {"max_age": "2s"}}],
    )
    with listening(config) as (_server, bootstrap):
        delivered = produce(bootstrap, "events", {"acks": "all"}, count=500)
        acked = time.monotonic()
        # The journal first, then the store: a record sealed in between (a slow machine
        # reaching max_age) has left the journal for a segment, and is found there.
        keys = journaled_keys(tmp_path / "store")
        table = stored(tmp_path / "store", "events")  # no columns while nothing is sealed
        sealed = table.column("key").to_pylist() if table.num_rows else []
        assert len(keys) == len(set(keys))
        assert set(keys) | set(sealed) == {m.key() for m in delivered}
        while stored(tmp_path / "store", "events").num_rows < len(delivered):
            assert time.monotonic() - acked < 20, "the journaled records were not sealed"
            time.sleep(0.1)
    # A clean stop seals everything and leaves no journal to replay.
    assert journaled_keys(tmp_path / "store") == []


def test_acks_0_lands_without_answers(tmp_path: Path) -> None:
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        produce(bootstrap, "events", {"acks": "0"}, count=500)
        deadline = time.monotonic() + 20
        while server.stats.records["events"] < 500 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert stored(tmp_path / "store", "events").num_rows == 500


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(tmp_path: Path, codec: str) -> None:
    config = api_config(tmp_path / "store")
    with listening(config) as (_server, bootstrap):
        delivered = produce(
            bootstrap, "events", {"acks": "all", "compression.type": codec}, count=400
        )
    check_exactly_once(stored(tmp_path / "store", "events"), delivered)


def test_json_topic_decodes_and_log_append_time(tmp_path: Path) -> None:
    config = api_config(
        tmp_path / "store",
        [{"name": "app", "partitions": 1, "format": "json", "timestamp": "log_append_time"}],
    )
    before = int(time.time() * 1000)
    producer_messages: list[Message] = []
    with listening(config) as (_server, bootstrap):
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(10):
            producer.produce(
                "app",
                value=b'{"level": "info", "n": %d}' % i,
                timestamp=1000,
                on_delivery=lambda e, m: producer_messages.append(m if e is None else e),
            )
        assert producer.flush(20) == 0
        assert all(isinstance(m, Message) for m in producer_messages), producer_messages
    rows = stored(tmp_path / "store", "app").to_pylist()
    assert [r["n"] for r in rows] == list(range(10))
    assert {r["level"] for r in rows} == {"info"}
    # LogAppendTime: the store's clock, and the producer is told so.
    assert all(r["timestamp"].timestamp() * 1000 >= before for r in rows)
    assert all(m.timestamp()[0] == 2 for m in producer_messages)  # TIMESTAMP_LOG_APPEND_TIME


def test_unknown_topic_is_refused_unless_auto_created(tmp_path: Path) -> None:
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        errors: list[KafkaError] = []
        producer = Producer(
            {"bootstrap.servers": bootstrap, "message.timeout.ms": 3000, "acks": "all"}
        )
        producer.produce("nope", value=b"x", on_delivery=lambda e, _m: errors.append(e))
        producer.flush(10)
        assert [e.code() for e in errors] == [KafkaError._MSG_TIMED_OUT] or [
            e.code() for e in errors
        ] == [KafkaError.UNKNOWN_TOPIC_OR_PART]
        assert server.sink is not None and "nope" not in server.sink.topics.partitions
    assert stored(tmp_path / "store", "nope").num_rows == 0
    auto = api_config(tmp_path / "auto", auto_create_topics=True, default_partitions=3)
    with listening(auto) as (server, bootstrap):
        delivered = produce(bootstrap, "fresh", {"acks": "all"}, count=30)
        assert server.sink is not None
        assert server.sink.topics.partitions["fresh"] == 3
    assert stored(tmp_path / "auto", "fresh").num_rows == len(delivered) == 30


def test_a_full_writer_throttles_producers_and_loses_nothing(tmp_path: Path) -> None:
    """A memory budget far below the incoming rate: the listener holds connections back
    (throttle_time_ms) instead of refusing or dropping records."""
    config = api_config(tmp_path / "store")
    storage = config.storage.model_copy(update={"memory_budget": 64 * 1024})
    config = config.model_copy(update={"storage": storage})
    with listening(config) as (server, bootstrap):
        delivered = produce(
            bootstrap, "events", {"acks": "1", "linger.ms": 20, "batch.size": 65536}, count=20000
        )
        assert server.stats.throttled_requests > 0
        assert server.stats.throttled_bytes > 0
    table = stored(tmp_path / "store", "events")
    assert table.num_rows == len(delivered) == 20000
    assert len(set(table.column("key").to_pylist())) == 20000


def test_admin_client_creates_topics_and_gets_kafkas_refusals(tmp_path: Path) -> None:
    config = api_config(tmp_path / "store")
    with listening(config) as (_server, bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def outcome(topic: NewTopic, validate_only: bool = False) -> int:
            future = admin.create_topics([topic], validate_only=validate_only)[topic.topic]
            try:
                future.result(10)
            except KafkaException as exc:
                code: int = exc.args[0].code()
                return code
            return KafkaError.NO_ERROR

        assert outcome(NewTopic("checked", 2), validate_only=True) == KafkaError.NO_ERROR
        assert outcome(NewTopic("made", 3, 1)) == KafkaError.NO_ERROR
        assert outcome(NewTopic("made", 3)) == KafkaError.TOPIC_ALREADY_EXISTS
        assert outcome(NewTopic("copies", 1, 3)) == KafkaError.INVALID_REPLICATION_FACTOR
        assert outcome(NewTopic("none", 0)) == KafkaError.INVALID_PARTITIONS
        compacted = NewTopic("compacted", 1, config={"cleanup.policy": "compact"})
        assert outcome(compacted) == KafkaError.INVALID_CONFIG
        plain = NewTopic("plain", 1, config={"cleanup.policy": "delete"})
        assert outcome(plain) == KafkaError.NO_ERROR
        topics = admin.list_topics(timeout=10).topics
        assert len(topics["made"].partitions) == 3
        assert "checked" not in topics and "compacted" not in topics
        delivered = produce(bootstrap, "made", {"acks": "all"}, count=30)
    assert stored(tmp_path / "store", "made").num_rows == len(delivered) == 30


def test_a_record_from_far_ahead_is_refused_with_invalid_timestamp(tmp_path: Path) -> None:
    """As Kafka's message.timestamp.after.max.ms: retention ages a segment by its newest
    timestamp, so one record from 2100 would keep its segment for good. A LogAppendTime
    topic replaces the producer's times and takes it."""
    config = api_config(
        tmp_path / "store",
        [
            {"name": "events", "partitions": 1},
            {"name": "stamped", "partitions": 1, "timestamp": "log_append_time"},
        ],
    )
    now_ms = int(time.time() * 1000)
    far = 4_102_444_800_000  # 2100-01-01
    outcomes: dict[str, KafkaError | None] = {}
    with listening(config) as (_server, bootstrap):
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})
        for name, topic, stamp in (
            ("far", "events", far),
            ("soon", "events", now_ms + 60_000),
            ("stamped", "stamped", far),
        ):
            producer.produce(
                topic,
                value=name.encode(),
                timestamp=stamp,
                on_delivery=lambda e, _m, name=name: outcomes.__setitem__(name, e),
            )
            assert producer.flush(20) == 0
    error = outcomes["far"]
    assert error is not None and error.code() == KafkaError.INVALID_TIMESTAMP
    assert outcomes["soon"] is None and outcomes["stamped"] is None
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"soon"]
    assert stored(tmp_path / "store", "stamped").column("value").to_pylist() == [b"stamped"]


def test_an_idempotent_producer_silent_past_the_expiry_goes_on_where_it_was(
    tmp_path: Path,
) -> None:
    """A producer forgotten after producer_expiry of silence on a partition (a rare key's
    partition) sends its next batch there with the sequence it had reached: taken, as Kafka
    takes any sequence from a producer it has no state for. Refused, librdkafka stopped for
    good with a fatal OUT_OF_ORDER_SEQUENCE_NUMBER."""
    config = api_config(tmp_path / "store", producer_expiry="1m")
    failed: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed.append(err)

    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(6):
            producer.produce("events", value=b"v%d" % i, partition=0, on_delivery=report)
            assert producer.flush(10) == 0
            if i == 2:
                state = server.sink.partitions[("events", 0)]
                for pid in state.seen:
                    state.seen[pid] -= 61  # a minute of silence
                assert server.sink.expire_producers() == 1
        assert failed == []
    values = stored(tmp_path / "store", "events").column("value").to_pylist()
    assert sorted(values) == [b"v%d" % i for i in range(6)]
