"""Responses written straight from the handlers' plain dicts, in the layout of kio's entities.

Fitting a dict to its version's kio entity (`protocol.build`) and having kio's generic
writer write that took 56 us for a Produce response of 8 partitions, about a sixth of the
listener's time per request with the Java client's defaults (docs/benchmarks.md, the Kafka
API): an entity built per partition, then every length kio computes checked again as it is
written, and a buffer per entity for its tagged fields. Here a writer per entity type is
worked out once from kio's own field metadata (as bounds.py reads requests) and writes the
dict directly: fixed-size fields in a row with one struct.pack, strings, arrays and
entities with their lengths, tagged fields left out as kio leaves them out, kio's own
writers for the rest (legacy strings, an entity given as an entity, a tagged field given).
The bytes are the ones build() and kio's writer give (tests/kafka_api/test_encoding.py
compares them for every response version answered); now 15 us for that response.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
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
from kio.serial._serialize import get_field_writer, get_writer

Write = Callable[[io.BytesIO, Any], None]  # one value
Step = Callable[[io.BytesIO, dict[str, Any]], None]  # one or more fields of an entity's dict

_I8, _I32 = struct.Struct(">b"), struct.Struct(">i")
_NULL_ENTITY, _ENTITY = _I8.pack(-1), _I8.pack(1)
_NO_TAGS = b"\0"


def write(entity_type: Any, out: io.BytesIO, values: dict[str, Any]) -> None:
    """Write `values` as an instance of `entity_type` (what build() would make of them)."""
    _entity(entity_type)(out, values)


# --- fitting plain dicts to a version's entity ------------------------------------------------


def build(entity_type: Any, values: dict[str, Any]) -> Any:
    """An instance of `entity_type` from `values`: keys the type lacks are dropped, fields
    not given take their default (or the zero of their type)."""
    kwargs: dict[str, Any] = {}
    for name, convert, annotation in _plan(entity_type):
        if name in values:
            kwargs[name] = convert(values[name])
        elif annotation is not _DEFAULT:
            kwargs[name] = zero(annotation)
    return entity_type(**kwargs)


_DEFAULT = object()  # in place of the annotation: the field has a default of its own


@cache
def _plan(entity_type: Any) -> tuple[tuple[str, Callable[[Any], Any], Any], ...]:
    """Per field: its name, how a plain value becomes its type, and its annotation when it
    has no default (its zero stands in when no value is given). Worked out from the type
    hints once per entity type: every response of an API version is built the same way."""
    hints = typing.get_type_hints(entity_type)
    plan = []
    for field in dataclasses.fields(entity_type):
        if field.name.startswith("__"):
            continue
        annotation = hints[field.name]
        has_default = not (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        plan.append((field.name, converter(annotation), _DEFAULT if has_default else annotation))
    return tuple(plan)


@cache
def converter(annotation: Any) -> Callable[[Any], Any]:
    """How a plain value becomes a field's type: None stays None at every level; tuples,
    unions, nested entities and durations in ms are followed through."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        inner = converter(typing.get_args(annotation)[0])
        return lambda value: None if value is None else tuple(inner(item) for item in value)
    if origin in (typing.Union, types.UnionType):
        return converter(next(a for a in typing.get_args(annotation) if a is not type(None)))
    if dataclasses.is_dataclass(annotation):
        entity = typing.cast(type[Any], annotation)
        return lambda value: build(entity, value) if isinstance(value, dict) else value
    if _is_timedelta(annotation):
        return lambda value: (
            datetime.timedelta(milliseconds=value) if isinstance(value, int | float) else value
        )
    return same


def same(value: Any) -> Any:
    return value


def zero(annotation: Any) -> Any:
    """The value of a field of this type that is not given."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return ()
    if origin in (typing.Union, types.UnionType):
        return None
    if annotation is ErrorCode:
        return ErrorCode.none
    if _is_timedelta(annotation):
        return datetime.timedelta(0)
    if annotation is uuid.UUID:
        return uuid.UUID(int=0)
    if annotation is bool:
        return False
    if isinstance(annotation, type) and issubclass(annotation, str):
        return ""
    if isinstance(annotation, type) and issubclass(annotation, bytes):
        return b""
    if isinstance(annotation, type) and issubclass(annotation, int | float):
        return 0
    raise TypeError(f"no zero value for {annotation!r}")


def _is_timedelta(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, datetime.timedelta)


# --- writing them without building the entity ------------------------------------------------


def uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (compact lengths, tag numbers and sizes)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


@cache
def _entity(entity_type: Any) -> Write:
    """The writer of `entity_type` from a dict (an instance of it goes to kio's own)."""
    flexible = bool(entity_type.__flexible__)
    hints = typing.get_type_hints(entity_type)
    steps: list[Step] = []
    run: list[tuple[str, Any, str, Callable[[Any], Any]]] = []  # fixed-size fields in a row
    tagged: list[tuple[int, str, Callable[[Any], bytes | None], bytes | None]] = []
    for field in dataclasses.fields(entity_type):
        annotation = hints[field.name]
        absent = _absent(field, annotation)
        # build() leaves fields named __x to their entity's default.
        name = "" if field.name.startswith("__") else field.name
        tag = get_field_tag(field)
        if tag is not None:
            encode = _tagged(field, annotation)
            tagged.append((int(tag), name, encode, encode(absent)))
            continue
        fixed = _fixed(field, annotation)
        if fixed is not None:
            run.append((name, absent, *fixed))
            continue
        if run:
            steps.append(_packed(run))
            run = []
        steps.append(_step(name, absent, _field(field, annotation, flexible)))
    if run:
        steps.append(_packed(run))
    tagged.sort(key=lambda found: found[0])
    fallback = entity_writer(entity_type)

    def write_entity(out: io.BytesIO, values: Any) -> None:
        if not isinstance(values, dict):
            fallback(out, values)
            return
        for step in steps:
            step(out, values)
        if not flexible:
            return
        if not tagged:
            out.write(_NO_TAGS)
            return
        found = []
        for tag, name, encode, absent_bytes in tagged:
            encoded = encode(values[name]) if name in values else absent_bytes
            if encoded is not None:
                found.append((tag, encoded))
        out.write(uvarint(len(found)))
        for tag, encoded in found:
            out.write(uvarint(tag))
            out.write(uvarint(len(encoded)))
            out.write(encoded)

    return write_entity


def _step(name: str, absent: Any, write: Write) -> Step:
    return lambda out, values: write(out, values.get(name, absent))


# Fixed-size primitives, written as kio writes them: a struct format and what kio packs of
# the value. Consecutive ones go out in one struct.pack (a Produce answer's partition is
# five in a row).
_FORMATS = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "float64": "d",
    "bool": "?",
}


def _fixed(
    field: dataclasses.Field[Any], annotation: Any
) -> tuple[str, Callable[[Any], Any]] | None:
    """A fixed-size field's struct format and how its (plain) value is packed; None for the
    others."""
    if not isinstance(classify_field(field), PrimitiveField):
        return None
    kafka_type = get_schema_field_type(field)
    optional = is_optional(field)
    if kafka_type in _FORMATS and not optional:
        return _FORMATS[kafka_type], same
    if kafka_type == "error_code" and not optional:
        return "h", same  # an IntEnum: packed as its value, which kio writes
    if kafka_type in ("timedelta_i32", "timedelta_i64") and not optional:
        convert = converter(annotation)
        return ("i" if kafka_type == "timedelta_i32" else "q"), lambda value: _ms(convert(value))
    if kafka_type == "datetime_i64":
        return "q", _nullable_time if optional else _time
    return None


def _packed(run: list[tuple[str, Any, str, Callable[[Any], Any]]]) -> Step:
    layout = struct.Struct(">" + "".join(fmt for _, _, fmt, _ in run))
    fields = tuple((name, absent) for name, absent, _, _ in run)
    # Most values are packed as they are; the times are converted (by position).
    converted = tuple(
        (at, convert) for at, (_, _, _, convert) in enumerate(run) if convert is not same
    )

    def write_run(out: io.BytesIO, values: dict[str, Any]) -> None:
        found = [values.get(name, absent) for name, absent in fields]
        for at, convert in converted:
            found[at] = convert(found[at])
        out.write(layout.pack(*found))

    return write_run


def _ms(value: datetime.timedelta) -> int:
    return round(value.total_seconds() * 1000)


def _time(value: datetime.datetime) -> int:
    return round(value.timestamp() * 1000)


def _nullable_time(value: datetime.datetime | None) -> int:
    return -1 if value is None else round(value.timestamp() * 1000)


def _absent(field: dataclasses.Field[Any], annotation: Any) -> Any:
    """The value a field takes when the dict does not give it, as build() sets it."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return zero(annotation)


def _field(field: dataclasses.Field[Any], annotation: Any, flexible: bool) -> Write:
    kind = classify_field(field)
    if isinstance(kind, EntityField):
        return _nested(_entity(kind.type_), nullable=is_optional(field))
    if isinstance(kind, EntityTupleField):
        return _array(_entity(kind.type_), flexible)
    kafka_type = get_schema_field_type(field)
    if isinstance(kind, PrimitiveTupleField):
        item = _primitive(kafka_type, flexible, optional=False)
        inner = converter(typing.get_args(_inner(annotation))[0])
        return _array(lambda out, value: item(out, inner(value)), flexible)
    assert isinstance(kind, PrimitiveField)
    optional = is_optional(field)
    if kafka_type in ("string", "bytes", "records") and flexible:
        return _compact(optional=optional)
    primitive = get_writer(kafka_type, flexible, optional)
    convert = converter(annotation)
    if convert is same:
        return primitive
    return lambda out, value: primitive(out, convert(value))


def _tagged(field: dataclasses.Field[Any], annotation: Any) -> Callable[[Any], bytes | None]:
    """A tagged field's encoding as kio writes it; None when kio leaves it out (its value is
    its default). Rare enough on the hot path to go through build() and kio's writers."""
    convert = converter(annotation)
    writer = get_field_writer(field, flexible=True, is_request_header=False, is_tag=True)
    default = get_tagged_field_default(field)

    def encode(value: Any) -> bytes | None:
        value = convert(value)
        if value == field.default or (field.default is dataclasses.MISSING and value == default):
            return None
        out = io.BytesIO()
        writer(out, value)
        return out.getvalue()

    return encode


def _nested(entity: Write, *, nullable: bool) -> Write:
    if not nullable:
        return entity

    def write_nullable(out: io.BytesIO, value: Any) -> None:
        if value is None:
            out.write(_NULL_ENTITY)
            return
        out.write(_ENTITY)
        entity(out, value)

    return write_nullable


def _array(item: Write, flexible: bool) -> Write:
    def write_array(out: io.BytesIO, items: Any) -> None:
        if items is None:
            out.write(b"\0" if flexible else _I32.pack(-1))
            return
        out.write(uvarint(len(items) + 1) if flexible else _I32.pack(len(items)))
        for value in items:
            item(out, value)

    return write_array


def _compact(*, optional: bool) -> Write:
    def write_compact(out: io.BytesIO, value: str | bytes | None) -> None:
        if value is None:
            if not optional:
                raise TypeError("Unexpectedly received None value")
            out.write(b"\0")
            return
        data = value.encode() if isinstance(value, str) else value
        out.write(uvarint(len(data) + 1))
        out.write(data)

    return write_compact


def _primitive(kafka_type: str, flexible: bool, *, optional: bool) -> Write:
    if kafka_type in ("string", "bytes", "records") and flexible:
        return _compact(optional=optional)
    return typing.cast(Write, get_writer(kafka_type, flexible, optional))


def _inner(annotation: Any) -> Any:
    """A tuple annotation out of its Optional."""
    if typing.get_origin(annotation) is tuple:
        return annotation
    return next(a for a in typing.get_args(annotation) if typing.get_origin(a) is tuple)
