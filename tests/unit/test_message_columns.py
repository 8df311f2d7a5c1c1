"""The worker's per-poll handling of Kafka messages: grouping by partition and the envelope
columns, which read message fields with map() over the unbound methods (a C-level loop).

Messages are real confluent_kafka.Message objects built with its constructor; no broker is
needed for these.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, KafkaError, Message
from hypothesis import given
from hypothesis import strategies as st

from bridge.config import parse_config
from bridge.consume.build import build_worker
from bridge.consume.messages import header_array, kafka_timestamps, records_of
from bridge.consume.worker import by_partition
from bridge.errors import BridgeError
from bridge.ingest.decode.raw import RawDecoder
from bridge.ingest.records import ENVELOPE, Kept
from plateau_core import Store


def message(
    topic: str = "t",
    partition: int = 0,
    offset: int = 0,
    *,
    value: bytes | None = b"v",
    key: bytes | None = None,
    headers: list[tuple[str, bytes | None]] | None = None,
    timestamp: tuple[int, int] = (TIMESTAMP_CREATE_TIME, 1_700_000_000_000),
    error: KafkaError | None = None,
) -> Message:
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        value=value,
        key=key,
        headers=headers,
        timestamp=timestamp,
        error=error,
    )


keys = st.tuples(st.sampled_from(["a", "b"]), st.integers(min_value=0, max_value=3))


@given(st.lists(keys, max_size=60))
def test_by_partition_keeps_every_message_once_in_consumed_order(order: list[tuple[str, int]]):
    messages = [message(t, p, offset=i) for i, (t, p) in enumerate(order)]
    groups = by_partition(messages)
    assert [k for k, _ in groups] == list(dict.fromkeys(order))  # first appearance order
    for (topic, partition), group in groups:
        assert all(m.topic() == topic and m.partition() == partition for m in group)
        offsets = [m.offset() for m in group]
        assert offsets == sorted(offsets)
    assert sorted(m.offset() for _, g in groups for m in g) == list(range(len(order)))


def test_by_partition_of_nothing_is_empty():
    assert by_partition([]) == []


def test_kafka_timestamps_fill_missing_ones_with_now():
    before = int(time.time() * 1000)
    stamps = kafka_timestamps(
        [
            message(timestamp=(TIMESTAMP_CREATE_TIME, 1_000)),
            message(timestamp=(TIMESTAMP_NOT_AVAILABLE, -1)),
            message(timestamp=(TIMESTAMP_CREATE_TIME, 2_000)),
        ]
    )
    after = int(time.time() * 1000)
    values = stamps.cast(pa.int64()).to_pylist()
    assert values[0] == 1_000 and values[2] == 2_000
    assert before <= values[1] <= after
    assert stamps.type == pa.timestamp("ms", tz="UTC")


def test_header_array_nulls_only_where_a_message_has_none():
    assert header_array([message(), message()]).to_pylist() == [None, None]
    mixed = header_array([message(), message(headers=[("h", b"1"), ("e", None)])])
    assert mixed.to_pylist() == [None, [{"key": "h", "value": b"1"}, {"key": "e", "value": None}]]
    assert header_array([message(headers=[])]).to_pylist() == [[]]


def test_raw_columns_carry_every_envelope_field():
    messages = [
        message(offset=7, key=b"k", value=b"x", headers=[("h", b"1")]),
        message(offset=9, key=None, value=None, timestamp=(TIMESTAMP_CREATE_TIME, 5)),
    ]
    records = records_of(messages)
    assert records.schema == ENVELOPE
    batch = RawDecoder(Kept()).decode(records).batches[0]
    assert batch.column("offset").to_pylist() == [7, 9]
    assert batch.column("key").to_pylist() == [b"k", None]
    assert batch.column("value").to_pylist() == [b"x", None]
    assert batch.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}], None]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_000, 5]
    dropped = RawDecoder(Kept(key=False, headers=False)).decode(records).batches[0]
    assert dropped.schema.names == ["offset", "timestamp", "value"]


def test_worker_sets_consumer_errors_aside_and_stops_on_fatal_ones(tmp_path: Path):
    config = parse_config(
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:1", "group_id": "g"},
            "storage": {"data_dir": str(tmp_path)},
            "topics": [{"source": "t"}],
        }
    )
    with Store.open(tmp_path) as store:
        worker = build_worker(config, store, threading.Event())
        try:
            eof = message(offset=3, value=None, error=KafkaError(KafkaError._PARTITION_EOF))
            ok = [message(offset=1), message(offset=2)]
            assert worker._without_errors([ok[0], eof, ok[1]]) == ok
            assert worker._without_errors(ok) is ok
            fatal = message(offset=4, error=KafkaError(KafkaError._FATAL, "fenced", fatal=True))
            with pytest.raises(BridgeError, match="fatal Kafka error"):
                worker._without_errors([fatal])
        finally:
            worker.consumer.close()
            worker.writer.close()
