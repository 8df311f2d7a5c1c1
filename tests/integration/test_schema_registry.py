"""Schema-registry formats on the consumer bridge: producers use confluent-kafka's
serializers against a registry over HTTP; the store reads back the produced objects; schemas
evolve over three versions; a registry outage pauses the partition and loses nothing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from bridge.ingest.records import ERROR_HEADERS
from bridge.ops.worker_status import read_status_files
from plateau_core import Store
from tests.bridge_support import end_offsets, make_config, serving, stored, wait_landed
from tests.registry_server import RegistryServer
from tests.schema_support import (
    EVENT_SCHEMA,
    ORDER_V1,
    ORDER_V2,
    ORDER_V3_INCOMPATIBLE,
    avro_key_serializer,
    avro_serializer,
    event,
    json_serializer,
    order,
    protobuf_serializer,
    reading,
    reading_class,
    stored_event,
    stored_order,
    stored_reading,
)

ENVELOPE = ("offset", "timestamp", "key", "headers", "partition")


@pytest.fixture
def registry() -> Iterator[RegistryServer]:
    with RegistryServer() as server:
        yield server


def _produce(kafka: str, topic: str, values: Iterable[bytes], keys: Iterable[bytes] = ()) -> None:
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    key_list = list(keys)
    for i, value in enumerate(values):
        producer.produce(topic, value, key=key_list[i] if key_list else None, partition=0)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _config(kafka: str, tmp_path: Path, registry: RegistryServer, topics: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    return make_config(
        kafka,
        tmp_path,
        topics,
        group=f"g-{uuid.uuid4().hex[:8]}",
        extra={"schema_registry": {"url": registry.url, "retry_interval": "500ms"}},
    )


def _values(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ENVELOPE} for r in rows]


def test_avro_protobuf_and_json_schema_topics_read_back_as_produced(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    registry: RegistryServer,
    spark: SparkSession,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    orders, readings, events = (topic_factory(partitions=1) for _ in range(3))
    produced_orders = [order(i) for i in range(3000)]
    cls = reading_class()
    produced_readings = [reading(cls, i) for i in range(2000)]
    produced_events = [event(i) for i in range(2000)]
    value = avro_serializer(client, ORDER_V1, orders)
    key = avro_key_serializer(client, orders)
    _produce(
        kafka,
        orders,
        (value(o) for o in produced_orders),
        [key({"id": o["id"]}) for o in produced_orders],
    )
    _produce(kafka, readings, map(protobuf_serializer(client, cls, readings), produced_readings))
    _produce(kafka, events, map(json_serializer(client, EVENT_SCHEMA, events), produced_events))
    config = _config(
        kafka,
        tmp_path,
        registry,
        [
            {"source": orders, "format": "avro", "key_format": "avro"},
            {"source": readings, "format": "protobuf"},
            {"source": events, "format": "json_schema"},
        ],
    )
    with serving(config):
        for topic in (orders, readings, events):
            wait_landed(tmp_path, topic, end_offsets(kafka, topic))
    rows = sorted(stored(tmp_path, orders).to_pylist(), key=lambda r: r["offset"])
    assert [r["key_decoded"] for r in rows] == [{"id": o["id"]} for o in produced_orders]
    assert [{k: v for k, v in r.items() if k != "key_decoded"} for r in _values(rows)] == [
        stored_order(o) for o in produced_orders
    ]
    landed = _values(sorted(stored(tmp_path, readings).to_pylist(), key=lambda r: r["offset"]))
    for row in landed:
        row["labels"] = sorted(row["labels"])
    assert landed == [stored_reading(m) for m in produced_readings]
    landed = _values(sorted(stored(tmp_path, events).to_pylist(), key=lambda r: r["offset"]))
    assert landed == [stored_event(e) for e in produced_events]
    for topic, column, total in (
        (orders, "key_decoded.id", sum(range(3000))),
        (readings, "`where`.lat", sum(i / 10 for i in range(2000) if i % 2)),
        (events, "user.id", sum(range(2000))),
    ):
        df = spark.read.format("plateau").option("path", str(tmp_path)).option("topic", topic)
        found = df.load().selectExpr(f"sum({column})").first()
        assert found is not None and found[0] == pytest.approx(total), (topic, column)


def test_three_versions_evolve_and_the_incompatible_one_goes_to_the_dlq(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    registry: RegistryServer,
    spark: SparkSession,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    topic, dlq = topic_factory(partitions=1), topic_factory(partitions=1)
    v1 = avro_serializer(client, ORDER_V1, topic)
    v2 = avro_serializer(client, ORDER_V2, topic)
    v3 = avro_serializer(client, ORDER_V3_INCOMPATIBLE, topic)
    values = [v1(order(i)) for i in range(100)]
    values += [v2(order(i, version=2)) for i in range(100, 200)]
    values += [v3(order(i, version=3)) for i in range(200, 205)]
    values += [v1(order(i)) for i in range(205, 300)]
    _produce(kafka, topic, values)
    config = _config(
        kafka,
        tmp_path,
        registry,
        [{"source": topic, "format": "avro", "on_error": "dlq", "dlq": dlq}],
    )
    with serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
    with Store.open(tmp_path) as store:
        schemas = list(store.manifest.schemas(topic).values())
    # Segments of the first version, then of the evolved one (v1 records after it included).
    assert sorted("channel" in s.names for s in schemas) == [False, True]
    table = stored(tmp_path, topic)
    assert table.num_rows == 295
    assert table.schema.field("channel").type.equals(table.schema.field("item").type)
    rows = {r["offset"]: r for r in table.to_pylist()}
    assert set(rows) == set(range(300)) - set(range(200, 205))
    assert rows[0]["channel"] is None and rows[150]["channel"] == "web"
    assert rows[299]["id"] == 299
    df = spark.read.format("plateau").option("path", str(tmp_path)).option("topic", topic).load()
    assert "channel" in df.columns
    assert df.where("channel IS NOT NULL").count() == 100
    assert df.count() == 295
    letters = _read_all(kafka, dlq, 5)
    assert [m.offset() for m in letters] == [0, 1, 2, 3, 4]
    reason = dict(letters[0].headers())[ERROR_HEADERS[3]].decode()
    assert f"subject {topic}-value version 3" in reason
    assert "incompatible" in reason


def test_a_registry_outage_pauses_the_partition_and_loses_nothing(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, registry: RegistryServer
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    topic = topic_factory(partitions=1)
    v1 = avro_serializer(client, ORDER_V1, topic)
    v2 = avro_serializer(client, ORDER_V2, topic)
    v2(order(0, version=2))  # registered now; the bridge first needs it during the outage
    config = _config(kafka, tmp_path, registry, [{"source": topic, "format": "avro"}])
    with serving(config):
        _produce(kafka, topic, [v1(order(i)) for i in range(1000)])
        wait_landed(tmp_path, topic, {0: 1000})
        registry.stop()
        down_at = time.monotonic()
        _produce(kafka, topic, [v2(order(i, version=2)) for i in range(1000, 2000)])
        paused = _wait_paused(tmp_path, topic, timeout_s=20)
        assert paused["paused"] == "schema_registry"
        while time.monotonic() - down_at < 10:
            with_status = _partition_status(tmp_path, topic)
            assert with_status is not None and with_status["paused"] == "schema_registry"
            time.sleep(1)
        assert _stored_offsets(tmp_path, topic) == set(range(1000)), "nothing past the outage"
        registry.start()
        wait_landed(tmp_path, topic, {0: 2000}, timeout_s=60)
    assert _stored_offsets(tmp_path, topic) == set(range(2000))
    table = stored(tmp_path, topic)
    rows = {r["offset"]: r for r in table.to_pylist()}
    assert rows[1500]["channel"] == "web" and rows[1500]["id"] == 1500


def _partition_status(data_dir: Path, topic: str) -> dict[str, Any] | None:
    for worker in read_status_files(data_dir):
        for partition in worker.get("partitions", []):
            if partition.get("topic") == topic:
                found: dict[str, Any] = partition
                return found
    return None


def _wait_paused(data_dir: Path, topic: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _partition_status(data_dir, topic)
        if found is not None and found.get("paused"):
            return found
        time.sleep(0.2)
    raise AssertionError(f"{topic} was not paused: {_partition_status(data_dir, topic)}")


def _stored_offsets(data_dir: Path, topic: str) -> set[int]:
    return set(stored(data_dir, topic).column("offset").to_pylist())


def _read_all(kafka: str, topic: str, count: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": f"read-{uuid.uuid4().hex}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[Any] = []
    deadline = time.monotonic() + 30
    while len(found) < count and time.monotonic() < deadline:
        found += [m for m in consumer.consume(100, timeout=1) if m.error() is None]
    consumer.close()
    return found
