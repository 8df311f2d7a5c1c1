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
from collections.abc import Callable
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


class NullArrayError(LengthError):
    """An array sent as null where its schema has no null: kio would read it as None, and
    Kafka refuses it. `path` names it from the request's top (`topics.partitions`)."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[str] = []

    @property
    def path(self) -> str:
        return ".".join(self.fields)

    def __str__(self) -> str:
        return f"a null {self.path}, where its schema has none"


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
    _entity(request_type, nullable=False)(cursor)


def check_header(header_type: Any, frame: bytes | memoryview) -> None:
    """The request header: fixed fields, a legacy client_id string, then (flexible) tags."""
    cursor = _Cursor(frame, 8, len(frame))
    length = cursor.fixed(_I16)
    if length >= 0:
        cursor.skip(length, "client_id")
    if header_type.__flexible__:
        _tags(header_type, _tagged(header_type), cursor)


# The walk of each entity type is worked out once, as a function per field, from kio's field
# metadata: a walk that looked each field's shape up again per request was most of a
# Produce request's parse (docs/benchmarks.md, the Kafka API).
Check = Callable[[_Cursor], None]


@cache
def _entity(entity_type: Any, *, nullable: bool) -> Check:
    regular, _ = _fields(entity_type)
    flexible = bool(entity_type.__flexible__)
    steps = tuple((field.name, _field(field, flexible)) for field in regular)

    def check(cursor: _Cursor) -> None:
        if nullable and cursor.fixed(_I8) < 0:
            return
        for name, step in steps:
            try:
                step(cursor)
            except NullArrayError as exc:
                exc.fields.insert(0, name)
                raise
        if flexible:
            _tags(entity_type, _tagged(entity_type), cursor)

    return check


@cache
def _tagged(entity_type: Any) -> dict[int, Check]:
    _, tagged = _fields(entity_type)
    return {tag: _field(field, True, tagged=True) for tag, field in tagged.items()}


def _tags(entity_type: Any, tagged: dict[int, Check], cursor: _Cursor) -> None:
    for _ in range(cursor.uvarint()):
        tag = cursor.uvarint()
        size = cursor.uvarint()
        check = tagged.get(tag)
        if check is None:
            raise LengthError(f"tagged field {tag} is not part of {entity_type.__name__}")
        inner = _Cursor(cursor.data, cursor.at, cursor.at + size)
        cursor.skip(size, f"tagged field {tag}")
        check(inner)


@cache
def _field(field: Any, flexible: bool, *, tagged: bool = False) -> Check:
    kind, may_be_null, kafka_type = _shape(field)
    optional = may_be_null and not tagged
    if isinstance(kind, PrimitiveField | EntityField):
        return _one(field, kind, kafka_type, flexible, optional)
    one = _one(field, kind, kafka_type, flexible, optional=False)
    name = field.name

    def check_array(cursor: _Cursor) -> None:
        count = cursor.uvarint() - 1 if flexible else cursor.fixed(_I32)
        if count < 0:
            if not may_be_null:
                raise NullArrayError
            return
        if count > cursor.left():
            raise LengthError(
                f"{name}: {count} elements claimed, {cursor.left()} bytes left in the frame"
            )
        for _ in range(count):
            one(cursor)

    return check_array


def _one(field: Any, kind: Any, kafka_type: str | None, flexible: bool, optional: bool) -> Check:
    if isinstance(kind, EntityField | EntityTupleField):
        return _entity(kind.type_, nullable=isinstance(kind, EntityField) and optional)
    name = field.name
    if kafka_type in _FIXED:
        size = _FIXED[kafka_type]
        return lambda cursor: cursor.skip(size, name)
    if kafka_type not in _VARIABLE:

        def unknown(cursor: _Cursor) -> None:
            raise LengthError(f"{name}: unknown kafka type {kafka_type}")

        return unknown
    length_of: Callable[[_Cursor], int]
    if flexible:
        length_of = _compact_length
    elif kafka_type == "string":
        length_of = _short_length
    else:
        length_of = _long_length

    def check_variable(cursor: _Cursor) -> None:
        length = length_of(cursor)
        if length >= 0:
            cursor.skip(length, name)

    return check_variable


def _compact_length(cursor: _Cursor) -> int:
    return cursor.uvarint() - 1


def _short_length(cursor: _Cursor) -> int:
    return cursor.fixed(_I16)


def _long_length(cursor: _Cursor) -> int:
    return cursor.fixed(_I32)


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
