"""A check of a request's lengths and counts before kio reads it.

kio's native reader reserves memory for an array from the count on the wire before reading
its elements, so a frame claiming two billion elements makes it ask for hundreds of
gigabytes, and the process aborts (found by fuzz/kafka_api_fuzz.py). This walk reads the
same layout from kio's own field metadata, in Python, and refuses any string, bytes or array
whose length or count is more than the bytes left in the frame: after it, every allocation
the reader makes is bounded by the frame's size.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

_FIXED = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_VARIABLE = ("string", "bytes", "records")
_I8, _I16, _I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")


class LengthError(ValueError):
    """A length or count that the frame cannot hold."""


class _Cursor:
    def __init__(self, data: bytes | memoryview, at: int, end: int) -> None:
        self.data = data
        self.at = at
        self.end = end

    def left(self) -> int:
        return self.end - self.at

    def skip(self, size: int, what: str) -> None:
        if size < 0 or size > self.left():
            raise LengthError(f"{what}: {size} bytes claimed, {self.left()} left in the frame")
        self.at += size

    def fixed(self, layout: struct.Struct) -> int:
        if layout.size > self.left():
            raise LengthError("the frame ends inside a field")
        (value,) = layout.unpack_from(self.data, self.at)
        self.at += layout.size
        return int(value)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.at >= self.end or shift > 63:
                raise LengthError("a varint runs past the frame")
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7


def check_request(request_type: Any, frame: bytes | memoryview, body_at: int) -> None:
    """Raise LengthError when a length or count in the request body overstates the frame."""
    cursor = _Cursor(frame, body_at, len(frame))
    _entity(request_type, cursor, nullable=False)


def check_header(header_type: Any, frame: bytes | memoryview) -> None:
    """The request header: fixed fields, a legacy client_id string, then (flexible) tags."""
    cursor = _Cursor(frame, 8, len(frame))
    length = cursor.fixed(_I16)
    if length >= 0:
        cursor.skip(length, "client_id")
    if header_type.__flexible__:
        _tags(header_type, cursor)


def _entity(entity_type: Any, cursor: _Cursor, *, nullable: bool) -> None:
    if nullable and cursor.fixed(_I8) < 0:
        return
    regular, _ = _fields(entity_type)
    flexible = entity_type.__flexible__
    for field in regular:
        _field(field, cursor, flexible)
    if flexible:
        _tags(entity_type, cursor)


def _tags(entity_type: Any, cursor: _Cursor) -> None:
    _, tagged = _fields(entity_type)
    for _ in range(cursor.uvarint()):
        tag = cursor.uvarint()
        size = cursor.uvarint()
        field = tagged.get(tag)
        if field is None:
            raise LengthError(f"tagged field {tag} is not part of {entity_type.__name__}")
        inner = _Cursor(cursor.data, cursor.at, cursor.at + size)
        cursor.skip(size, f"tagged field {tag}")
        _field(field, inner, True, tagged=True)


def _field(field: Any, cursor: _Cursor, flexible: bool, *, tagged: bool = False) -> None:
    kind, optional, kafka_type = _shape(field)
    optional = optional and not tagged
    if isinstance(kind, PrimitiveField | EntityField):
        _one(field, kind, kafka_type, cursor, flexible, optional)
        return
    count = cursor.uvarint() - 1 if flexible else cursor.fixed(_I32)
    if count < 0:
        return  # a null array
    if count > cursor.left():
        raise LengthError(
            f"{field.name}: {count} elements claimed, {cursor.left()} bytes left in the frame"
        )
    for _ in range(count):
        _one(field, kind, kafka_type, cursor, flexible, optional=False)


def _one(  # noqa: PLR0917 - one field's shape, worked out once (_shape)
    field: Any, kind: Any, kafka_type: str | None, cursor: _Cursor, flexible: bool, optional: bool
) -> None:
    if isinstance(kind, EntityField | EntityTupleField):
        _entity(kind.type_, cursor, nullable=isinstance(kind, EntityField) and optional)
        return
    if kafka_type in _FIXED:
        cursor.skip(_FIXED[kafka_type], field.name)
        return
    if kafka_type not in _VARIABLE:
        raise LengthError(f"{field.name}: unknown kafka type {kafka_type}")
    if flexible:
        length = cursor.uvarint() - 1
    elif kafka_type == "string":
        length = cursor.fixed(_I16)
    else:
        length = cursor.fixed(_I32)
    if length >= 0:
        cursor.skip(length, field.name)


@cache
def _shape(field: Any) -> tuple[Any, bool, str | None]:
    """What kind of field this is, whether it may be null and its Kafka type (primitives):
    worked out from type hints, so once per field of kio's schemas, not once per request."""
    kind = classify_field(field)
    kafka_type = None
    if isinstance(kind, PrimitiveField | PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
    return kind, is_optional(field), kafka_type


@cache
def _fields(entity_type: Any) -> tuple[list[Any], dict[int, Any]]:
    """The entity's fields in wire order, and its tagged fields by tag (kio's generated
    entities carry resolved types, as classify_field needs)."""
    regular: list[Any] = []
    tagged: dict[int, Any] = {}
    for field in dataclasses.fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            regular.append(field)
        else:
            tagged[int(tag)] = field
    return regular, tagged
