"""Protobuf writer schemas as Arrow types, and parsed messages as what `pa.array` takes.

The registry holds a schema as a serialized FileDescriptorProto (what confluent-kafka's
serializer registers); a message class is built from it at run time, so no generated code
is needed. The mapping (docs/formats.md): message -> struct, repeated -> list, map -> map,
enum -> string (the value's name; its number when the schema has no name for it),
int32/sint32/sfixed32 -> int32, int64/sint64/sfixed64/uint32/fixed32 -> int64,
uint64/fixed64 -> decimal128(20, 0), float -> float32, double -> float64, bytes -> binary,
google.protobuf.Timestamp -> timestamp[us, UTC], the wrapper types -> their value, nullable.
A field without presence (a proto3 scalar that is not `optional`) that was not written reads
as its default, as protobuf itself reads it; one with presence reads as null.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka.schema_registry.common.protobuf import _init_pool, _str_to_proto
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from bridge.ingest.decode.avro_arrow import TIMESTAMP_UTC, UnsupportedSchemaError

Get = Callable[[Message], Any]
Convert = Callable[[Any], Any]

F = FieldDescriptor
SCALARS: Mapping[int, pa.DataType] = {
    F.TYPE_INT32: pa.int32(),
    F.TYPE_SINT32: pa.int32(),
    F.TYPE_SFIXED32: pa.int32(),
    F.TYPE_INT64: pa.int64(),
    F.TYPE_SINT64: pa.int64(),
    F.TYPE_SFIXED64: pa.int64(),
    F.TYPE_UINT32: pa.int64(),
    F.TYPE_FIXED32: pa.int64(),
    F.TYPE_UINT64: pa.decimal128(20, 0),
    F.TYPE_FIXED64: pa.decimal128(20, 0),
    F.TYPE_FLOAT: pa.float32(),
    F.TYPE_DOUBLE: pa.float64(),
    F.TYPE_BOOL: pa.bool_(),
    F.TYPE_STRING: pa.string(),
    F.TYPE_BYTES: pa.binary(),
}
UNSIGNED_64 = (F.TYPE_UINT64, F.TYPE_FIXED64)
WRAPPERS = {
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}


class ProtobufReader:
    """Parses the payloads of one message type of a writer schema into values of
    `arrow_type`."""

    def __init__(
        self, schema_str: str, references: Mapping[str, str], message_index: list[int]
    ) -> None:
        pool = DescriptorPool()
        _init_pool(pool)
        try:
            for name, text in references.items():
                pool.Add(_str_to_proto(name, text))
            file_proto = _str_to_proto("default", schema_str)
            pool.Add(file_proto)
            descriptor = _message_at(pool.FindFileByName(file_proto.name), message_index)
        except Exception as exc:  # the protobuf runtime raises several kinds
            raise UnsupportedSchemaError(f"not a usable Protobuf schema: {exc}") from None
        self.message_class = GetMessageClass(descriptor)
        self.arrow_type, self._convert = _Mapper().message(descriptor)

    def read(self, payload: bytes) -> Any:
        message = self.message_class()
        try:
            message.ParseFromString(payload)
        except DecodeError as exc:
            raise ValueError(f"not a Protobuf message of the schema: {exc}") from None
        return self._convert(message)


def _message_at(file: Any, index: list[int]) -> Descriptor:
    """The message a record names by its index path (Confluent's message indexes)."""
    types = list(file.message_types_by_name.values())
    found: Descriptor | None = None
    for position in index or [0]:
        if not 0 <= position < len(types):
            raise UnsupportedSchemaError(f"message index {index} is not in the schema")
        found = types[position]
        types = list(found.nested_types)
    assert found is not None
    return found


class _Mapper:
    def __init__(self) -> None:
        self.active: set[str] = set()

    def message(self, descriptor: Descriptor) -> tuple[pa.DataType, Convert]:
        name = descriptor.full_name
        if name == "google.protobuf.Timestamp":
            return TIMESTAMP_UTC, _timestamp
        if name in WRAPPERS:
            inner = descriptor.fields_by_name["value"]
            arrow, convert = self.single(inner)
            return arrow, lambda m: convert(m.value)
        if name in self.active:
            raise UnsupportedSchemaError(f"message {name} contains itself: it has no column type")
        self.active.add(name)
        try:
            plans = [(f.name, *self.field(f)) for f in descriptor.fields]
        finally:
            self.active.discard(name)
        arrow = pa.struct([pa.field(n, t) for n, t, _ in plans])
        getters = [(n, g) for n, _, g in plans]
        return arrow, lambda m: {n: get(m) for n, get in getters}

    def single(self, field: FieldDescriptor) -> tuple[pa.DataType, Convert]:
        """The type of one value of `field` and its conversion (repetition aside)."""
        if field.type in (F.TYPE_MESSAGE, F.TYPE_GROUP) and field.message_type is not None:
            return self.message(field.message_type)
        if field.type == F.TYPE_ENUM and field.enum_type is not None:
            names = {v.number: v.name for v in field.enum_type.values}
            return pa.string(), lambda v: names.get(v, str(v))
        found = SCALARS.get(field.type)
        if found is None:
            raise UnsupportedSchemaError(f"field {field.full_name} has an unknown type")
        if field.type in UNSIGNED_64:
            return found, decimal.Decimal
        return found, _same

    def field(self, field: FieldDescriptor) -> tuple[pa.DataType, Get]:
        name = field.name
        entry = field.message_type
        if entry is not None and _is_map(field):
            key_type, key = self.single(entry.fields_by_name["key"])
            value_type, value = self.single(entry.fields_by_name["value"])
            return pa.map_(key_type, value_type), lambda m: [
                (key(k), value(v)) for k, v in getattr(m, name).items()
            ]
        arrow, convert = self.single(field)
        if field.is_repeated:
            return pa.list_(arrow), lambda m: [convert(v) for v in getattr(m, name)]
        if field.has_presence:
            return arrow, lambda m: convert(getattr(m, name)) if m.HasField(name) else None
        return arrow, lambda m: convert(getattr(m, name))


def _is_map(field: FieldDescriptor) -> bool:
    entry = field.message_type
    return bool(field.is_repeated and entry is not None and entry.GetOptions().map_entry)


def _same(value: Any) -> Any:
    return value


def _timestamp(message: Any) -> datetime.datetime:
    stamp: datetime.datetime = message.ToDatetime(tzinfo=datetime.UTC)
    return stamp
