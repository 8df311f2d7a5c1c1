"""JSON Schema writer schemas as Arrow types; records validated against them.

The mapping (docs/formats.md): object with properties -> struct; object with only
additionalProperties -> map<string, _>; array -> list; string -> string (format date-time ->
timestamp[us, UTC], format date -> date32); integer -> int64; number -> float64; boolean ->
bool; a type list with null, or a oneOf/anyOf of null and one schema -> that type, nullable;
anything else (several types, unions, no type) -> string holding the value as JSON text.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema
import pyarrow as pa
from jsonschema.exceptions import SchemaError, ValidationError

from bridge.ingest.decode.avro_arrow import TIMESTAMP_UTC, UnsupportedSchemaError

Convert = Callable[[Any], Any]
SIMPLE: Mapping[str, pa.DataType] = {
    "string": pa.string(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
}
MAX_DEPTH = 64


class JsonSchemaReader:
    """Parses and validates the payloads of one writer schema into values of
    `arrow_type`."""

    def __init__(self, schema_str: str) -> None:
        try:
            schema = json.loads(schema_str)
            validator_class = jsonschema.validators.validator_for(schema)
            validator_class.check_schema(schema)
        except (ValueError, SchemaError) as exc:
            raise UnsupportedSchemaError(f"not a valid JSON Schema: {exc}") from None
        self.validator = validator_class(schema)
        self.root = schema
        self.arrow_type, self._convert = self._map(schema, 0)

    def read(self, payload: bytes) -> Any:
        try:
            value = json.loads(payload)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        try:
            self.validator.validate(value)
        except ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(the record)"
            raise ValueError(f"does not match its JSON Schema at {where}: {exc.message}") from None
        return self._convert(value)

    def _resolve(self, node: Any) -> Any:
        ref = node.get("$ref") if isinstance(node, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return node
        found: Any = self.root
        for part in ref[2:].split("/"):
            if not isinstance(found, dict) or part not in found:
                raise UnsupportedSchemaError(f"$ref {ref} points nowhere in the schema")
            found = found[part]
        return found

    def _map(self, node: Any, depth: int) -> tuple[pa.DataType, Convert]:
        if depth > MAX_DEPTH:
            raise UnsupportedSchemaError("the schema nests too deeply (a recursive $ref?)")
        node = self._resolve(node)
        if not isinstance(node, dict):
            return pa.string(), _as_json
        kind = node.get("type")
        choices = node.get("oneOf") or node.get("anyOf")
        if kind is None and isinstance(choices, list):
            present = [c for c in choices if not _is_null(self._resolve(c))]
            if len(present) == 1:
                return self._map(present[0], depth + 1)
            return pa.string(), _as_json
        if isinstance(kind, list):
            present = [k for k in kind if k != "null"]
            if len(present) != 1:
                return pa.string(), _as_json
            kind = present[0]
        if kind == "object":
            return self._object(node, depth)
        if kind == "array":
            items = node.get("items")
            if not isinstance(items, dict):
                return pa.list_(pa.string()), _list(_as_json)
            item_type, convert = self._map(items, depth + 1)
            return pa.list_(item_type), _list(convert)
        if kind == "string" and node.get("format") == "date-time":
            return TIMESTAMP_UTC, _optional(_datetime)
        if kind == "string" and node.get("format") == "date":
            return pa.date32(), _optional(datetime.date.fromisoformat)
        if isinstance(kind, str) and kind in SIMPLE:
            return SIMPLE[kind], _integer if kind == "integer" else _same
        return pa.string(), _as_json

    def _object(self, node: Mapping[str, Any], depth: int) -> tuple[pa.DataType, Convert]:
        properties = node.get("properties")
        extra = node.get("additionalProperties")
        if not properties and isinstance(extra, dict):
            value_type, convert = self._map(extra, depth + 1)
            return pa.map_(pa.string(), value_type), _pairs(convert)
        if not isinstance(properties, dict):
            return pa.string(), _as_json
        mapped = [(name, *self._map(sub, depth + 1)) for name, sub in properties.items()]
        arrow = pa.struct([pa.field(n, t) for n, t, _ in mapped])
        converts = [(n, c) for n, _, c in mapped]

        def fields(value: Any) -> Any:
            if value is None:
                return None
            return {n: c(value.get(n)) for n, c in converts}

        return arrow, fields


def _is_null(node: Any) -> bool:
    # A subschema may be a boolean (`true`: anything) as well as an object.
    return isinstance(node, dict) and node.get("type") == "null"


def _same(value: Any) -> Any:
    return value


def _integer(value: Any) -> Any:
    # JSON Schema counts 1.0 as an integer; Arrow's int64 column does not take a float.
    return int(value) if isinstance(value, float) else value


def _as_json(value: Any) -> Any:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _optional(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


def _datetime(value: str) -> datetime.datetime:
    stamp = datetime.datetime.fromisoformat(value)
    if stamp.tzinfo is None:
        raise ValueError(f"date-time {value!r} has no time zone")
    return stamp


def _list(convert: Convert) -> Convert:
    return lambda v: None if v is None else [convert(x) for x in v]


def _pairs(convert: Convert) -> Convert:
    return lambda v: None if v is None else [(k, convert(x)) for k, x in v.items()]
