"""Avro writer schemas as Arrow types, and fastavro's values as what `pa.array` takes.

The mapping (docs/formats.md): record -> struct, array -> list, map -> map<string, _>,
enum -> string, fixed and bytes -> binary, decimal -> decimal128, date -> date32,
timestamp-millis/micros -> timestamp[us, UTC], local-timestamp-* -> timestamp[us],
time-millis/micros -> int32 milliseconds / int64 microseconds after midnight, uuid -> string,
a union of null and one type -> that type, nullable; any other union -> a struct with one
field per branch (member0, member1, ... in the union's order, nulls left out), of which the
written one is set.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa

Fix = Callable[[Any], Any]  # a decoded value -> what pa.array takes for the Arrow type

MAX_DECIMAL128 = 38
PRIMITIVES: Mapping[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
TIMESTAMP_LOCAL = pa.timestamp("us")


class UnsupportedSchemaError(ValueError):
    """A writer schema plateau cannot store as columns (the records that use it are poison)."""


@dataclass(frozen=True)
class Mapped:
    type: pa.DataType
    fix: Fix | None  # None: fastavro's value is already what pa.array takes
    accepts: Callable[[Any], bool]  # is a decoded value of this branch (for unions)
    # Encoded in zero bytes (null, an empty fixed, a record of such fields): an array of them
    # could claim any count in a few bytes, and the decoder would loop through all of it.
    empty: bool = False


class AvroReader:
    """Decodes the payloads of one writer schema into values of `arrow_type`."""

    def __init__(self, schema_str: str, references: Mapping[str, Any] | None = None) -> None:
        """`references`: the schemas `schema_str` names (schema references), as JSON, by
        reference name."""
        known: dict[str, Any] = {}  # fastavro's parsed named types, filled by parse_schema
        try:
            for referenced in (references or {}).values():
                fastavro.parse_schema(referenced, named_schemas=known)
            raw = json.loads(schema_str)
            self.parsed = fastavro.parse_schema(raw, named_schemas=known)
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            raise UnsupportedSchemaError(f"not a valid Avro schema: {exc}") from None
        mapped = _Mapper(dict(references or {})).map(raw, "")
        self.arrow_type = mapped.type
        self._fix = mapped.fix

    def read(self, payload: bytes) -> Any:
        value = fastavro.schemaless_reader(
            io.BytesIO(payload),
            self.parsed,
            None,
            return_record_name=True,
            return_record_name_override=True,
        )
        return value if self._fix is None else self._fix(value)


class _Mapper:
    def __init__(self, named: dict[str, Any]) -> None:
        self.named: dict[str, Any] = {}
        for name, schema in named.items():
            self._remember(schema, "")
            self.named.setdefault(name, schema)
        self.active: set[str] = set()

    def _remember(self, node: Any, namespace: str) -> None:
        if isinstance(node, dict) and node.get("type") in ("record", "error", "enum", "fixed"):
            self.named[_full_name(node, namespace)] = node

    def map(self, node: Any, namespace: str) -> Mapped:
        if isinstance(node, list):
            return self._union(node, namespace)
        if isinstance(node, str):
            if node in PRIMITIVES:
                return Mapped(PRIMITIVES[node], None, _accepts_primitive(node), node == "null")
            name = node if "." in node or not namespace else f"{namespace}.{node}"
            found = self.named.get(name, self.named.get(node))
            if found is None:
                raise UnsupportedSchemaError(f"unknown Avro type {node!r}")
            return self._named(found, namespace)
        if not isinstance(node, dict):
            raise UnsupportedSchemaError(f"not an Avro type: {node!r}")
        logical = node.get("logicalType")
        if logical is not None:
            found = _logical(node, logical)
            if found is not None:
                return found
        kind = node.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            self._remember(node, namespace)
            return self._named(node, namespace)
        if kind == "array":
            item = self.map(node.get("items"), namespace)
            if item.empty:
                raise UnsupportedSchemaError(
                    f"an array of {node.get('items')!r}, whose items are encoded in no bytes: "
                    "a record could claim any number of them"
                )
            fix = None if item.fix is None else _list_fix(item.fix)
            return Mapped(pa.list_(item.type), fix, _is(list))
        if kind == "map":
            value = self.map(node.get("values"), namespace)
            return Mapped(pa.map_(pa.string(), value.type), _map_fix(value.fix), _is(dict))
        return self.map(kind, namespace)

    def _named(self, node: dict[str, Any], namespace: str) -> Mapped:
        kind = node["type"]
        if kind == "enum":
            symbols = frozenset(node.get("symbols", ()))
            return Mapped(pa.string(), None, lambda v: isinstance(v, str) and v in symbols)
        if kind == "fixed":
            return Mapped(pa.binary(), None, _is(bytes), node.get("size") == 0)
        name = _full_name(node, namespace)
        if name in self.active:
            raise UnsupportedSchemaError(f"record {name} contains itself: it has no column type")
        self.active.add(name)
        try:
            inner = name.rpartition(".")[0]
            fields = [(f["name"], self.map(f["type"], inner)) for f in node.get("fields", ())]
        finally:
            self.active.discard(name)
        arrow = pa.struct([pa.field(n, m.type) for n, m in fields])
        fixes = {n: m.fix for n, m in fields if m.fix is not None}
        empty = all(m.empty for _, m in fields)
        return Mapped(arrow, _record_fix(fixes) if fixes else None, _accepts_record(name), empty)

    def _union(self, branches: list[Any], namespace: str) -> Mapped:
        mapped = [self.map(b, namespace) for b in branches]
        present = [m for m in mapped if not pa.types.is_null(m.type)]
        if not present:
            return Mapped(pa.null(), None, lambda v: v is None)
        if len(present) == 1:
            only = present[0]
            fix = only.fix
            return Mapped(only.type, None if fix is None else _optional(fix), only.accepts)
        arrow = pa.struct([pa.field(f"member{i}", m.type) for i, m in enumerate(present)])
        return Mapped(arrow, _union_fix(present), lambda v: True)


def _full_name(node: Mapping[str, Any], namespace: str) -> str:
    name = str(node.get("name", ""))
    if "." in name:
        return name
    space = node.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def _logical(node: Mapping[str, Any], logical: str) -> Mapped | None:
    """The Arrow side of a logical type, or None to map the underlying type (as Avro says an
    unknown or invalid logical type is read)."""
    base = node.get("type")
    if logical == "decimal" and base in ("bytes", "fixed"):
        precision, scale = int(node.get("precision", 0)), int(node.get("scale", 0))
        if 0 < precision <= MAX_DECIMAL128 and 0 <= scale <= precision:
            return Mapped(pa.decimal128(precision, scale), None, _is(decimal.Decimal))
        return Mapped(pa.string(), _optional(str), _is(decimal.Decimal))
    if logical in ("timestamp-millis", "timestamp-micros") and base == "long":
        return Mapped(TIMESTAMP_UTC, None, _is(datetime.datetime))
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and base == "long":
        return Mapped(TIMESTAMP_LOCAL, None, _is(datetime.datetime))
    if logical == "date" and base == "int":
        return Mapped(pa.date32(), None, _is(datetime.date))
    if logical == "time-millis" and base == "int":
        return Mapped(pa.int32(), _optional(_millis), _is(datetime.time))
    if logical == "time-micros" and base == "long":
        return Mapped(pa.int64(), _optional(_micros), _is(datetime.time))
    if logical == "uuid" and base == "string":
        return Mapped(pa.string(), _optional(str), _is(uuid.UUID, str))
    return None


def _micros(value: datetime.time) -> int:
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return seconds * 1_000_000 + value.microsecond


def _millis(value: datetime.time) -> int:
    return _micros(value) // 1000


def _is(*kinds: type) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, kinds)


def _accepts_primitive(name: str) -> Callable[[Any], bool]:
    if name == "null":
        return lambda v: v is None
    if name == "boolean":
        return lambda v: isinstance(v, bool)
    if name in ("int", "long"):
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if name in ("float", "double"):
        return lambda v: isinstance(v, float)
    if name == "bytes":
        return _is(bytes)
    return _is(str)


def _accepts_record(name: str) -> Callable[[Any], bool]:
    short = name.rpartition(".")[2]
    return lambda v: (
        isinstance(v, dict) or (isinstance(v, tuple) and len(v) == 2 and v[0] in (name, short))
    )


def _optional(fix: Fix) -> Fix:
    return lambda v: None if v is None else fix(v)


def _list_fix(fix: Fix) -> Fix:
    return lambda v: None if v is None else [fix(x) for x in v]


def _map_fix(fix: Fix | None) -> Fix:
    # pa.array takes a map as a list of pairs.
    if fix is None:
        return lambda v: None if v is None else list(v.items())
    return lambda v: None if v is None else [(k, fix(x)) for k, x in v.items()]


def _record_fix(fixes: dict[str, Fix]) -> Fix:
    def fixed(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, tuple):  # (record name, fields) from a union of records
            value = value[1]
        out = dict(value)
        for name, fix in fixes.items():
            out[name] = fix(out.get(name))
        return out

    return fixed


def _union_fix(branches: list[Mapped]) -> Fix:
    def fixed(value: Any) -> Any:
        if value is None:
            return None
        for i, branch in enumerate(branches):
            if branch.accepts(value):
                inner = value[1] if isinstance(value, tuple) and branch.fix is None else value
                return {f"member{i}": inner if branch.fix is None else branch.fix(inner)}
        raise ValueError(f"a union value of type {type(value).__name__} matches no branch")

    return fixed
