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
import io
import json
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
    # Encoded in zero bytes (null, an empty fixed, a record of such fields): an array of them
    # could claim any count in a few bytes, and the decoder would loop through all of it.
    empty: bool = False


class AvroReader:
    """Decodes the payloads of one writer schema into values of `arrow_type`."""

    def __init__(self, schema_str: str, references: Mapping[str, Any] | None = None) -> None:
        """`references`: the schemas `schema_str` names (schema references), as JSON, by
        reference name."""
        known: dict[str, Any] = {}  # fastavro's parsed named types, filled by parse_schema
        tagger = _Tagger()
        try:
            for referenced in (references or {}).values():
                fastavro.parse_schema(tagger.tag(referenced, ""), named_schemas=known)
            raw = json.loads(schema_str)
            self.parsed = fastavro.parse_schema(tagger.tag(raw, ""), named_schemas=known)
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            raise UnsupportedSchemaError(f"not a valid Avro schema: {exc}") from None
        mapped = _Mapper(dict(references or {}), tagger.unions).map(raw, "")
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


class _Tagger:
    """A copy of a schema for fastavro in which each branch of a union of several types is
    the one field of a record of its own. A record adds no bytes, so the copy reads the same
    data, and fastavro names the record, so the branch that was written is known: from the
    value alone it is not (an int in `["int", "long"]`, a float in `["float", "double"]`)."""

    def __init__(self) -> None:
        # id() of a union in the original schema -> its wrappers' names -> the index of the
        # branch among the union's non-null branches
        self.unions: dict[int, dict[str, int]] = {}

    def tag(self, node: Any, namespace: str) -> Any:
        if isinstance(node, list):
            return self._union(node, namespace)
        if not isinstance(node, dict):
            return node
        copy = dict(node)
        kind = node.get("type")
        if kind in ("record", "error"):
            inner = _full_name(node, namespace).rpartition(".")[0]
            # Defaults only matter when resolving against a reader schema, which is not done
            # here; fastavro would check them against the wrapped branches.
            copy["fields"] = [
                {k: v for k, v in field.items() if k != "default"}
                | {"type": self.tag(field.get("type"), inner)}
                for field in node.get("fields", ())
            ]
        elif kind == "array":
            copy["items"] = self.tag(node.get("items"), namespace)
        elif kind == "map":
            copy["values"] = self.tag(node.get("values"), namespace)
        elif isinstance(kind, (list, dict)):
            copy["type"] = self.tag(kind, namespace)
        return copy

    def _union(self, branches: list[Any], namespace: str) -> list[Any]:
        if sum(not _is_null(b) for b in branches) < 2:
            return [self.tag(b, namespace) for b in branches]
        names: dict[str, int] = {}
        tagged: list[Any] = []
        self.unions[id(branches)] = names
        number = len(self.unions)  # taken before the branches: they may hold unions too
        for branch in branches:
            if _is_null(branch):
                tagged.append(branch)
                continue
            # No namespace of its own: names inside the branch resolve as they did.
            name = f"plateau_union{number}_branch{len(names)}"
            names[name] = len(names)
            field = {"name": "value", "type": self.tag(branch, namespace)}
            tagged.append({"type": "record", "name": name, "fields": [field]})
        return tagged


def _is_null(node: Any) -> bool:
    return node == "null" or (isinstance(node, dict) and node.get("type") == "null")


class _Mapper:
    def __init__(self, named: dict[str, Any], unions: dict[int, dict[str, int]]) -> None:
        self.unions = unions
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
                return Mapped(PRIMITIVES[node], None, node == "null")
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
            return Mapped(pa.list_(item.type), fix)
        if kind == "map":
            value = self.map(node.get("values"), namespace)
            return Mapped(pa.map_(pa.string(), value.type), _map_fix(value.fix))
        return self.map(kind, namespace)

    def _named(self, node: dict[str, Any], namespace: str) -> Mapped:
        kind = node["type"]
        if kind == "enum":
            return Mapped(pa.string(), None)
        if kind == "fixed":
            return Mapped(pa.binary(), None, node.get("size") == 0)
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
        return Mapped(arrow, _record_fix(fixes) if fixes else None, empty)

    def _union(self, branches: list[Any], namespace: str) -> Mapped:
        mapped = [self.map(b, namespace) for b in branches]
        present = [m for m in mapped if not pa.types.is_null(m.type)]
        if not present:
            return Mapped(pa.null(), None)
        if len(present) == 1:
            only = present[0]
            fix = only.fix
            return Mapped(only.type, None if fix is None else _optional(fix))
        arrow = pa.struct([pa.field(f"member{i}", m.type) for i, m in enumerate(present)])
        return Mapped(arrow, _union_fix(present, self.unions[id(branches)]))


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
            return Mapped(pa.decimal128(precision, scale), None)
        return Mapped(pa.string(), _optional(str))
    if logical in ("timestamp-millis", "timestamp-micros") and base == "long":
        return Mapped(TIMESTAMP_UTC, None)
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and base == "long":
        return Mapped(TIMESTAMP_LOCAL, None)
    if logical == "date" and base == "int":
        return Mapped(pa.date32(), None)
    if logical == "time-millis" and base == "int":
        return Mapped(pa.int32(), _optional(_millis))
    if logical == "time-micros" and base == "long":
        return Mapped(pa.int64(), _optional(_micros))
    if logical == "uuid" and base == "string":
        return Mapped(pa.string(), _optional(str))
    return None


def _micros(value: datetime.time) -> int:
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return seconds * 1_000_000 + value.microsecond


def _millis(value: datetime.time) -> int:
    return _micros(value) // 1000


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
        out = dict(value)
        for name, fix in fixes.items():
            out[name] = fix(out.get(name))
        return out

    return fixed


def _union_fix(branches: list[Mapped], tags: Mapping[str, int]) -> Fix:
    """`tags`: the names of the records _Tagger wrapped the branches in."""

    def fixed(value: Any) -> Any:
        if value is None:
            return None
        name, wrapper = value  # (the wrapper's full name, its one field)
        i = tags[name.rpartition(".")[2]]
        inner = wrapper["value"]
        fix = branches[i].fix
        return {f"member{i}": inner if fix is None else fix(inner)}

    return fixed
