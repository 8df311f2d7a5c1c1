"""Schemas, serializers and message classes for the schema-registry format tests.

Protobuf message classes are built from descriptors here (no generated code, no protoc), the
way any producer's generated classes describe themselves to confluent-kafka's serializer.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, timestamp_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

Serialize = Callable[[Any], bytes]

ORDER_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["NEW", "PAID"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "either", "type": ["null", "long", "string"], "default": None},
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [
                    {"name": "city", "type": "string"},
                    {"name": "zip", "type": ["null", "int"], "default": None},
                ],
            },
        },
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "offset", "type": "int"},  # shadows plateau's own column: lands as offset_
    ],
}
# v2 adds a field (with a default, as a compatible change does); v3 changes a type.
ORDER_V2: dict[str, Any] = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}],
}
ORDER_V3_INCOMPATIBLE: dict[str, Any] = {
    **ORDER_V1,
    "fields": [
        {"name": "id", "type": "string"} if f["name"] == "id" else f for f in ORDER_V2["fields"]
    ],
}


def order(i: int, *, version: int = 1) -> dict[str, Any]:
    """An order as the Avro producer writes it (and as the store must read it back)."""
    found: dict[str, Any] = {
        "id": i,
        "item": f"item-{i % 17}",
        "price": decimal.Decimal(i % 1000) / 100,
        "at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        + datetime.timedelta(milliseconds=i),
        "tags": [f"t{j}" for j in range(i % 3)],
        "attrs": {f"a{j}": j * i for j in range(i % 2 + 1)},
        "kind": "PAID" if i % 2 else "NEW",
        "note": None if i % 5 else f"note {i}",
        "either": None if i % 3 == 0 else (i if i % 3 == 1 else f"s{i}"),
        "address": {"city": f"city-{i % 4}", "zip": None if i % 2 else 10000 + i},
        "ref": uuid.UUID(int=i),
        "day": datetime.date(2026, 1, 1) + datetime.timedelta(days=i % 30),
        "offset": -i,
    }
    if version >= 2:
        found["channel"] = "app" if i % 2 else "web"
    if version >= 3:
        found["id"] = f"order-{i}"
    return found


def stored_order(produced: dict[str, Any]) -> dict[str, Any]:
    """What the store holds for a produced order: the mapping of docs/formats.md."""
    either = produced["either"]
    return {
        **{k: v for k, v in produced.items() if k != "offset"},
        "offset_": produced["offset"],
        "attrs": list(produced["attrs"].items()),
        "either": None
        if either is None
        else {
            "member0": either if isinstance(either, int) else None,
            "member1": either if isinstance(either, str) else None,
        },
        "ref": str(produced["ref"]),
    }


def avro_serializer(client: SchemaRegistryClient, schema: dict[str, Any], topic: str) -> Serialize:
    serializer = AvroSerializer(client, json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda value: serializer(value, context)


def avro_key_serializer(client: SchemaRegistryClient, topic: str) -> Serialize:
    schema = {"type": "record", "name": "OrderKey", "fields": [{"name": "id", "type": "long"}]}
    serializer = AvroSerializer(client, json.dumps(schema))
    context = SerializationContext(topic, MessageField.KEY)
    return lambda value: serializer(value, context)


# --- protobuf -------------------------------------------------------------------------------

F = descriptor_pb2.FieldDescriptorProto


def reading_class(extra_field: bool = False) -> type[Message]:
    """`message Reading` with a nested message, a repeated field, a map, an enum, a
    timestamp, a proto3 optional and a oneof; `extra_field` adds `unit` (a second version)."""
    pool = DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    file = descriptor_pb2.FileDescriptorProto(
        name=f"reading{'_v2' if extra_field else ''}.proto",
        package="sensors",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )
    location = file.message_type.add(name="Location")
    location.field.add(name="lat", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    location.field.add(name="lon", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    status = file.enum_type.add(name="Status")
    status.value.add(name="UNKNOWN", number=0)
    status.value.add(name="OK", number=1)
    status.value.add(name="FAILED", number=2)
    reading = file.message_type.add(name="Reading")
    labels = reading.nested_type.add(name="LabelsEntry")
    labels.options.map_entry = True
    labels.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    labels.field.add(name="value", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    add = reading.field.add
    add(name="sensor", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    add(name="value", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    add(name="count", number=3, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    add(name="samples", number=4, type=F.TYPE_INT32, label=F.LABEL_REPEATED)
    add(
        name="where",
        number=5,
        type=F.TYPE_MESSAGE,
        label=F.LABEL_OPTIONAL,
        type_name=".sensors.Location",
    )
    add(
        name="status",
        number=6,
        type=F.TYPE_ENUM,
        label=F.LABEL_OPTIONAL,
        type_name=".sensors.Status",
    )
    add(
        name="at",
        number=7,
        type=F.TYPE_MESSAGE,
        label=F.LABEL_OPTIONAL,
        type_name=".google.protobuf.Timestamp",
    )
    add(
        name="labels",
        number=8,
        type=F.TYPE_MESSAGE,
        label=F.LABEL_REPEATED,
        type_name=".sensors.Reading.LabelsEntry",
    )
    reading.oneof_decl.add(name="_comment")
    add(
        name="comment",
        number=9,
        type=F.TYPE_STRING,
        label=F.LABEL_OPTIONAL,
        oneof_index=0,
        proto3_optional=True,
    )
    add(name="big", number=10, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    if extra_field:
        add(name="unit", number=11, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName("sensors.Reading"))


def reading(cls: type[Message], i: int) -> Message:
    message = cls(
        sensor=f"s{i % 7}",
        value=i / 4,
        count=i * 1_000_000_007,
        samples=list(range(i % 4)),
        status=i % 3,
        labels={f"l{j}": str(j) for j in range(i % 3)},
        big=2**63 + i,
    )
    if i % 2:
        message.where.lat, message.where.lon = i / 10, -i / 10
    message.at.FromDatetime(
        datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=i)
    )
    if i % 3 == 0:
        message.comment = f"c{i}"
    if "unit" in cls.DESCRIPTOR.fields_by_name:
        message.unit = "celsius"
    return message


def stored_reading(message: Message) -> dict[str, Any]:
    i = int(message.value * 4)
    found = {
        "sensor": message.sensor,
        "value": message.value,
        "count": message.count,
        "samples": list(message.samples),
        "where": {"lat": i / 10, "lon": -i / 10} if i % 2 else None,
        "status": ["UNKNOWN", "OK", "FAILED"][i % 3],
        "at": message.at.ToDatetime(tzinfo=datetime.UTC),
        "labels": sorted(message.labels.items()),
        "comment": f"c{i}" if i % 3 == 0 else None,
        "big": decimal.Decimal(2**63 + i),
    }
    if "unit" in message.DESCRIPTOR.fields_by_name:
        found["unit"] = "celsius"
    return found


def protobuf_serializer(client: SchemaRegistryClient, cls: type[Message], topic: str) -> Serialize:
    serializer = ProtobufSerializer(cls, client)
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda value: serializer(value, context)


# --- JSON Schema ----------------------------------------------------------------------------

EVENT_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Event",
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "count": {"type": "integer"},
        "score": {"type": ["number", "null"]},
        "ok": {"type": "boolean"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": {"type": "object", "additionalProperties": {"type": "integer"}},
        "user": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "email": {"type": "string"}},
        },
        "anything": {},
    },
    "required": ["name", "count"],
}


def event(i: int) -> dict[str, Any]:
    return {
        "name": f"e{i % 9}",
        "count": i,
        "score": None if i % 4 == 0 else i / 8,
        "ok": bool(i % 2),
        "at": f"2026-01-01T00:00:{i % 60:02d}+00:00",
        "tags": [f"t{j}" for j in range(i % 3)],
        "meta": {f"m{j}": j for j in range(i % 2)},
        "user": {"id": i, "email": f"u{i}@example.invalid"},
        "anything": [i, "x"] if i % 2 else {"k": i},
    }


def stored_event(produced: dict[str, Any]) -> dict[str, Any]:
    return {
        **produced,
        "at": datetime.datetime.fromisoformat(produced["at"]),
        "meta": list(produced["meta"].items()),
        "anything": json.dumps(produced["anything"], separators=(",", ":")),
    }


def json_serializer(client: SchemaRegistryClient, schema: dict[str, Any], topic: str) -> Serialize:
    serializer = JSONSerializer(json.dumps(schema), client)
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda value: serializer(value, context)
