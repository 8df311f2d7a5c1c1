"""Confluent's wire format: a zero byte, the writer schema's id (4 bytes, big-endian),
for Protobuf the index path of the message type (zig-zag varints), then the encoded record;
and the readers that decode what follows the header, one per writer schema."""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Protocol

import pyarrow as pa

from bridge.ingest.decode.avro_arrow import AvroReader, UnsupportedSchemaError
from bridge.ingest.decode.json_schema_arrow import JsonSchemaReader
from bridge.ingest.decode.protobuf_arrow import ProtobufReader
from bridge.ingest.decode.registry import WriterSchema

HEADER = 5
MAX_INDEXES = 64
KINDS = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}


class FramingError(ValueError):
    """The bytes do not start with Confluent's wire-format header."""


class Framed(NamedTuple):  # a tuple: one is made per record, on the hot path
    schema_id: int
    indexes: tuple[int, ...]  # the protobuf message path; () otherwise
    payload: bytes


class Reader(Protocol):
    arrow_type: pa.DataType

    def read(self, payload: bytes) -> Any: ...


def unframe(data: bytes, protobuf: bool) -> Framed:
    if len(data) < HEADER:
        raise FramingError(f"{len(data)} bytes: too short for a schema registry header")
    if data[0] != 0:
        raise FramingError(
            f"first byte is 0x{data[0]:02x}, not 0x00: not in the schema registry wire format"
        )
    schema_id = int.from_bytes(data[1:HEADER], "big")
    if not protobuf:
        return Framed(schema_id, (), data[HEADER:])
    position = HEADER
    count, position = _zigzag(data, position)
    if count < 0 or count > MAX_INDEXES:
        raise FramingError(f"message index count {count} is out of range")
    indexes = []
    for _ in range(count):
        index, position = _zigzag(data, position)
        indexes.append(index)
    return Framed(schema_id, tuple(indexes) or (0,), data[position:])


def _zigzag(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise FramingError("the message index ends early")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), position
        if shift > 63:
            raise FramingError("a message index varint is too long")


def make_reader(fmt: str, writer: WriterSchema, indexes: tuple[int, ...]) -> Reader:
    """A reader for records of `writer` in format `fmt`; raises UnsupportedSchemaError
    (for a schema of another kind, too)."""
    expected = KINDS[fmt]
    if writer.kind != expected:
        raise UnsupportedSchemaError(
            f"{writer.where} is a {writer.kind} schema; the topic's format is {fmt}"
        )
    text = writer.schema.schema_str or ""
    if fmt == "avro":
        named = {name: json.loads(text) for name, text in _references(writer).items()}
        return AvroReader(text, named)
    if fmt == "protobuf":
        return ProtobufReader(text, _references(writer), list(indexes))
    return JsonSchemaReader(text)


def _references(writer: WriterSchema) -> dict[str, str]:
    """The schemas `writer` names (Avro named types, Protobuf imports), by reference name,
    each after those it names itself."""
    for ref in writer.schema.references or ():
        if ref.name is None or ref.subject is None or ref.version is None:
            raise UnsupportedSchemaError(f"{writer.where} has an incomplete schema reference")
    return dict(writer.references)
