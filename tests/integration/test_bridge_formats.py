"""raw, json (declared and inferred) and arrow topics land end to end, each offset once."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition

from bridge.demo.producer import Record, produce
from plateau_core import Store
from tests.bridge_support import end_offsets, make_config, serving, stored, wait_landed

BASE_MS = 1_750_000_000_000


def _kafka_view(
    kafka: str, topic: str
) -> dict[tuple[int, int], tuple[bytes | None, bytes | None, list, int]]:
    """What Kafka holds: (partition, offset) -> (key, value, headers, timestamp)."""
    ends = end_offsets(kafka, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"view-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    view = {}
    try:
        while len(view) < sum(ends.values()):
            for m in consumer.consume(1000, timeout=2):
                assert m.error() is None
                view[(m.partition(), m.offset())] = (
                    m.key(),
                    m.value(),
                    [(k, v) for k, v in (m.headers() or [])],
                    m.timestamp()[1],
                )
    finally:
        consumer.close()
    return view


def test_raw_topic_keeps_key_headers_timestamp_offset(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=3)
    records = [
        Record(
            value=f"payload-{i}".encode() if i % 50 else None,
            key=None if i % 7 == 0 else f"k{i % 13}".encode(),
            headers=(("trace", f"t{i}".encode()), ("n", None)) if i % 3 else (),
            timestamp_ms=BASE_MS + i,
        )
        for i in range(3000)
    ]
    produce(kafka, topic, records)
    config = make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}")
    with serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
    table = stored(tmp_path, topic)
    view = _kafka_view(kafka, topic)
    assert table.num_rows == len(view) == 3000
    rows = table.to_pylist()
    landed = {(r["partition"], r["offset"]) for r in rows}
    assert landed == set(view), "every Kafka offset lands exactly once"
    for row in rows:
        key, value, headers, stamp = view[(row["partition"], row["offset"])]
        assert row["key"] == key
        assert row["value"] == value
        assert [(h["key"], h["value"]) for h in row["headers"] or []] == headers
        assert int(row["timestamp"].timestamp() * 1000) == stamp


def test_json_declared_and_inferred(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    declared = topic_factory(partitions=2)
    inferred = topic_factory(partitions=2)
    events = []
    for i in range(2000):
        event: dict[str, object] = {"seq": i, "service": f"s{i % 4}", "ts": BASE_MS + i}
        if i >= 1000:
            event["latency"] = i / 10  # appears later: the inferred schema widens
        if i % 100 == 0:
            event["extra"] = {"nested": True}
        events.append(event)
    for topic in (declared, inferred):
        produce(kafka, topic, (Record(value=json.dumps(e).encode(), key=b"k") for e in events))
    config = make_config(
        kafka,
        tmp_path,
        [
            {
                "source": declared,
                "format": "json",
                "schema": {"seq": "int", "service": "string", "latency": "float"},
            },
            {"source": inferred, "format": "json", "timestamp": "field:ts"},
        ],
        group=f"g-{declared}",
    )
    with serving(config):
        wait_landed(tmp_path, declared, end_offsets(kafka, declared))
        wait_landed(tmp_path, inferred, end_offsets(kafka, inferred))

    strict = stored(tmp_path, declared)
    assert strict.num_rows == 2000
    assert set(strict.schema.names) == {
        "offset",
        "timestamp",
        "key",
        "headers",
        "seq",
        "service",
        "latency",
        "partition",
    }
    assert strict.schema.field("seq").type == pa.int64()
    assert sorted(strict.column("seq").to_pylist()) == list(range(2000))
    by_seq = {r["seq"]: r for r in strict.to_pylist()}
    assert by_seq[5]["latency"] is None and by_seq[1500]["latency"] == 150.0

    loose = stored(tmp_path, inferred)
    assert loose.num_rows == 2000
    assert {"seq", "service", "ts", "latency", "extra"} <= set(loose.schema.names)
    by_seq = {r["seq"]: r for r in loose.to_pylist()}
    assert by_seq[100]["extra"] == {"nested": True}
    assert by_seq[1500]["latency"] == 150.0
    # timestamp: field:ts puts the event time in the timestamp column.
    assert all(
        int(r["timestamp"].timestamp() * 1000) == BASE_MS + r["seq"] for r in loose.to_pylist()
    )


def _arrow_message(start: int, rows: int) -> bytes:
    table = pa.table(
        {
            "feature": pa.array([float(start + i) for i in range(rows)]),
            "label": pa.array([f"l{(start + i) % 3}" for i in range(rows)]),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_arrow_messages_of_many_rows(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    produce(
        kafka,
        topic,
        (
            Record(
                value=_arrow_message(m * 100, 100), key=f"m{m}".encode(), timestamp_ms=BASE_MS + m
            )
            for m in range(200)
        ),
    )
    config = make_config(
        kafka, tmp_path, [{"source": topic, "format": "arrow"}], group=f"g-{topic}"
    )
    with serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
    table = stored(tmp_path, topic)
    assert table.num_rows == 200 * 100
    assert sorted(table.column("feature").to_pylist()) == [float(i) for i in range(20_000)]
    view = _kafka_view(kafka, topic)
    rows_per_message: dict[tuple[int, int], int] = {}
    for row in table.to_pylist():
        key, _value, _headers, stamp = view[(row["partition"], row["offset"])]
        m = int(key.decode()[1:])
        assert m * 100 <= row["feature"] < (m + 1) * 100  # rows keep their message's offset
        assert int(row["timestamp"].timestamp() * 1000) == stamp
        rows_per_message[(row["partition"], row["offset"])] = (
            rows_per_message.get((row["partition"], row["offset"]), 0) + 1
        )
    assert set(rows_per_message.values()) == {100}
    assert len(rows_per_message) == 200


def test_fields_named_like_plateaus_columns_in_any_case_land_suffixed(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """`Timestamp` beside plateau's `timestamp` made both ambiguous in Spark (names resolve
    ignoring case), and a field `partition` took the name readers give the Kafka partition:
    `where={"partition": ...}` was refused, the Spark connector refused the topic."""
    as_json, as_arrow = topic_factory(partitions=1), topic_factory(partitions=1)
    fields = [{"Timestamp": i, "partition": i % 3, "Key": f"k{i}", "n": i} for i in range(60)]
    produce(kafka, as_json, (Record(value=json.dumps(f).encode()) for f in fields))
    produce(
        kafka,
        as_arrow,
        (Record(value=_ipc(pa.table({k: [v] for k, v in f.items()}))) for f in fields),
    )
    config = make_config(
        kafka,
        tmp_path,
        [{"source": as_json, "format": "json"}, {"source": as_arrow, "format": "arrow"}],
        group=f"g-{as_json}",
    )
    with serving(config):
        wait_landed(tmp_path, as_json, end_offsets(kafka, as_json))
        wait_landed(tmp_path, as_arrow, end_offsets(kafka, as_arrow))
    with Store.open(tmp_path) as store:
        for topic in (as_json, as_arrow):
            result = store.read(topic, where={"partition_": 2})
            names = result.schema.names
            assert len({n.lower() for n in names}) == len(names), names
            assert {"Timestamp_", "partition_", "Key_", "n"} <= set(names)
            rows = result.to_table().to_pylist()
            assert [r["n"] for r in rows] == list(range(2, 60, 3))
            assert [r["Timestamp_"] for r in rows] == list(range(2, 60, 3))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())
