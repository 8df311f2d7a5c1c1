"""Schema-registry formats on plateau's Kafka API: librdkafka producers with confluent-kafka's
serializers write avro, protobuf and json_schema topics directly; a registry outage answers
with a retriable error, so the producer retries and nothing is lost or doubled."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from bridge.config import Config, parse_config
from plateau_core import Store
from tests.kafka_api.support import listening, stored
from tests.registry_server import RegistryServer
from tests.schema_support import (
    EVENT_SCHEMA,
    ORDER_V1,
    ORDER_V2,
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

ENVELOPE = ("offset", "timestamp", "key", "headers")


@pytest.fixture
def registry() -> Iterator[RegistryServer]:
    with RegistryServer() as server:
        yield server


def _config(data_dir: Path, registry: RegistryServer, topics: list[dict[str, Any]]) -> Config:
    return parse_config(
        {
            "storage": {"data_dir": str(data_dir)},
            "kafka_api": {"listen": "127.0.0.1:0"},
            "schema_registry": {"url": registry.url, "retry_interval": "200ms"},
            "topics": topics,
            "shutdown_timeout": "20s",
        }
    )


def _produce(bootstrap: str, topic: str, values: list[bytes], **settings: Any) -> list[Message]:
    delivered: list[Message] = []
    failed: list[KafkaError] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        (failed.append(err) if err is not None else delivered.append(msg))

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **settings}
    )
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=report)
        producer.poll(0)
    assert producer.flush(90) == 0
    assert failed == []
    return delivered


def _rows(data_dir: Path, topic: str) -> list[dict[str, Any]]:
    rows = sorted(stored(data_dir, topic).to_pylist(), key=lambda r: r["offset"])
    return [{k: v for k, v in r.items() if k not in ENVELOPE} for r in rows]


def test_produced_avro_protobuf_and_json_schema_read_back(
    tmp_path: Path, registry: RegistryServer
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    cls = reading_class()
    orders = [order(i) for i in range(1500)]
    readings = [reading(cls, i) for i in range(1000)]
    events = [event(i) for i in range(1000)]
    config = _config(
        tmp_path,
        registry,
        [
            {"name": "orders", "partitions": 1, "format": "avro"},
            {"name": "readings", "partitions": 1, "format": "protobuf"},
            {"name": "events", "partitions": 1, "format": "json_schema"},
        ],
    )
    with listening(config) as (_, bootstrap):
        # One serializer per topic: a new one looks its subject up in the registry again.
        serialize = avro_serializer(client, ORDER_V1, "orders")
        _produce(bootstrap, "orders", [serialize(o) for o in orders])
        serialize = protobuf_serializer(client, cls, "readings")
        _produce(bootstrap, "readings", [serialize(m) for m in readings])
        serialize = json_serializer(client, EVENT_SCHEMA, "events")
        _produce(bootstrap, "events", [serialize(e) for e in events])
    assert _rows(tmp_path, "orders") == [stored_order(o) for o in orders]
    landed = _rows(tmp_path, "readings")
    for row in landed:
        row["labels"] = sorted(row["labels"])
    assert landed == [stored_reading(m) for m in readings]
    assert _rows(tmp_path, "events") == [stored_event(e) for e in events]


def test_a_registry_outage_makes_producers_retry_and_loses_nothing(
    tmp_path: Path, registry: RegistryServer
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    v1 = avro_serializer(client, ORDER_V1, "orders")
    v2 = avro_serializer(client, ORDER_V2, "orders")
    first = [v1(order(i)) for i in range(500)]
    second = [v2(order(i, version=2)) for i in range(500, 1000)]  # registered, not yet fetched
    config = _config(tmp_path, registry, [{"name": "orders", "partitions": 1, "format": "avro"}])
    with listening(config) as (server, bootstrap):
        _produce(bootstrap, "orders", first)
        registry.stop()
        back = threading.Timer(8.0, registry.start)
        back.start()
        started = time.monotonic()
        try:
            delivered = _produce(bootstrap, "orders", second, **{"delivery.timeout.ms": 60_000})
        finally:
            back.join()
        waited = time.monotonic() - started
        refusals = server.stats.errors[("Produce", "kafka_storage_error")]
    assert waited >= 7.0, "acknowledged only once the registry was back"
    assert refusals > 0
    assert sorted(m.offset() for m in delivered) == list(range(500, 1000))
    rows = _rows(tmp_path, "orders")
    assert [r["id"] for r in rows] == list(range(1000))
    assert rows[999]["channel"] == "app" and rows[0]["channel"] is None


def test_a_slow_registry_holds_up_only_the_batch_that_waits_for_it(
    tmp_path: Path, registry: RegistryServer
) -> None:
    """The first fetch of a schema runs off the listener's event loop: while the registry
    takes its time, other connections' records (a raw topic here) are acknowledged."""
    client = SchemaRegistryClient({"url": registry.url})
    serialize = avro_serializer(client, ORDER_V1, "orders")
    encoded = [serialize(order(i)) for i in range(10)]
    config = parse_config(
        {
            "storage": {"data_dir": str(tmp_path)},
            "kafka_api": {"listen": "127.0.0.1:0"},
            "schema_registry": {"url": registry.url, "timeout": "90s"},
            "topics": [
                {"name": "orders", "partitions": 1, "format": "avro"},
                {"name": "plain", "partitions": 1},
            ],
            "shutdown_timeout": "20s",
        }
    )
    registry.holding.set()
    with listening(config) as (_, bootstrap):
        slow: list[list[Message]] = []
        waiting = threading.Thread(
            target=lambda: slow.append(_produce(bootstrap, "orders", encoded))
        )
        waiting.start()
        try:
            assert registry.held.wait(30), "plateau never asked the registry for the schema"
            # The registry has not answered: a blocked event loop could not take these.
            plain = _produce(
                bootstrap,
                "plain",
                [b"p%d" % i for i in range(200)],
                **{"message.timeout.ms": 20_000},
            )
            assert not registry.released.is_set()
        finally:
            registry.released.set()
            waiting.join(60)
    assert len(plain) == 200
    assert [len(m) for m in slow] == [10]
    assert [r["id"] for r in _rows(tmp_path, "orders")] == list(range(10))
    assert stored(tmp_path, "plain").num_rows == 200


def test_fields_named_like_plateaus_columns_in_any_case_land_suffixed(
    tmp_path: Path, registry: RegistryServer
) -> None:
    """As on the consume path: `Timestamp` beside plateau's `timestamp` was ambiguous to
    readers that resolve names ignoring case, and `partition` is the name they give the
    Kafka partition."""
    client = SchemaRegistryClient({"url": registry.url})
    schema = {
        "type": "record",
        "name": "Named",
        "fields": [
            {"name": "Timestamp", "type": "long"},
            {"name": "Partition", "type": "int"},
            {"name": "n", "type": "int"},
        ],
    }
    fields = [{"Timestamp": i, "Partition": i % 3, "n": i} for i in range(60)]
    config = _config(
        tmp_path,
        registry,
        [
            {"name": "named-avro", "partitions": 1, "format": "avro"},
            {"name": "named-json", "partitions": 1, "format": "json"},
        ],
    )
    with listening(config) as (_, bootstrap):
        serialize = avro_serializer(client, schema, "named-avro")
        _produce(bootstrap, "named-avro", [serialize(f) for f in fields])
        _produce(bootstrap, "named-json", [json.dumps(f).encode() for f in fields])
    with Store.open(tmp_path) as store:
        for topic in ("named-avro", "named-json"):
            result = store.read(topic, where={"Partition_": 2})
            names = result.schema.names
            assert len({n.lower() for n in names}) == len(names), names
            rows = result.to_table().to_pylist()
            assert [r["n"] for r in rows] == list(range(2, 60, 3))
            assert [r["Timestamp_"] for r in rows] == list(range(2, 60, 3))
