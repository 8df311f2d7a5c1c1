"""How a topic's segment schemas merge into the one schema every reader gives: types widened,
timestamps of several zones put in UTC and of several units in the finer one (up to
microseconds), decimals beside integers wide enough for both, and columns whose types clash
read as text. The Spark connector (TopicSchema.java) follows the same rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from plateau_core.coarsened import UNIT_NANOS
from plateau_core.errors import InvalidInputError
from plateau_core.rollup import rollup_sum
from plateau_core.schema import FIXED_FIELDS, OFFSET, TIMESTAMP, fingerprint
from plateau_core.stored_names import TwinColumnsError, read_schema

UINT64_WITH_SIGNED = pa.decimal128(20, 0)


def merge_schemas(schemas: Iterable[pa.Schema], topic: str | None = None) -> pa.Schema:
    """One schema for segments written over time: fields united, types widened, all nullable
    except the fixed columns, in first-seen order. A column whose types cannot be merged is
    a string column (see `merged_schema`)."""
    return merged_schema(schemas, topic).schema


@dataclass(frozen=True)
class MergedSchema:
    """A topic's segment schemas merged, and the columns whose stored types clash (two
    workers each inferred a JSON field's type: an int in one partition, a string in another),
    with those types. A clashed column is a string column: `conform` gives the values of
    segments that hold it as something else as their JSON text (plateau_core.json_text)."""

    schema: pa.Schema
    clashes: Mapping[str, tuple[str, ...]]

    def settled(self) -> pa.Schema:
        """The schema without the clashed columns: what a decoder may start from."""
        return pa.schema([f for f in self.schema if f.name not in self.clashes])


def merged_schema(schemas: Iterable[pa.Schema], topic: str | None = None) -> MergedSchema:
    """`schemas` merged; each segment's columns as they read (plateau_core.stored_names: a
    `partition` of a segment sealed before the `_` suffix rule as `partition_`), so old and
    new segments give one column. A schema holding both names raises TwinColumnsError
    carrying its fingerprint."""
    stored = list({fingerprint(s): _read_as(s.remove_metadata()) for s in schemas}.values())
    if not stored:
        return MergedSchema(pa.schema(FIXED_FIELDS), {})
    unique = _in_utc(stored)
    clashes: dict[str, tuple[str, ...]] = {}
    try:
        merged = pa.unify_schemas(unique, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:
        clashes = _clashes(unique, stored)
        if not clashes:
            raise InvalidInputError(
                f"the topic's segments have schemas that cannot be merged: {exc}"
            ) from exc
        texts = [
            pa.schema([f.with_type(pa.string()) if f.name in clashes else f for f in s])
            for s in unique
        ]
        merged = pa.unify_schemas(texts, promote_options="permissive")
    fields = [merged.field(OFFSET), merged.field(TIMESTAMP)]
    fields[0] = fields[0].with_nullable(False)
    fields += [
        f.with_nullable(True)
        for f in _settled_fields(merged, unique, topic)
        if f.name not in (OFFSET, TIMESTAMP)
    ]
    return MergedSchema(pa.schema(fields), clashes)


def _read_as(schema: pa.Schema) -> pa.Schema:
    try:
        return read_schema(schema)
    except TwinColumnsError as exc:
        exc.fingerprint = fingerprint(schema)
        raise


def _settled_fields(
    merged: pa.Schema, schemas: list[pa.Schema], topic: str | None = None
) -> list[pa.Field]:
    """Arrow's permissive merge of `schemas` (of `topic`), each field's type `_settled`, or
    `_sum_holding` for a roll-up's sum."""
    fields = []
    for f in merged:
        stored = [s.field(f.name).type for s in schemas if f.name in s.names]
        held = _sum_holding(stored) if rollup_sum(topic, f.name) else None
        fields.append(f.with_type(held or _settled(f.type, stored)))
    return fields


def _settled(merged: pa.DataType, stored: list[pa.DataType]) -> pa.DataType:
    """`merged` (Arrow's permissive merge of the `stored` types of one place of a column) as
    the readers merge it, in a column or inside a struct, list or map:

    - a stored uint64 beside a signed integer: decimal(20, 0), which holds both (Arrow's
      int64 failed the read on the first value above 2**63 - 1);
    - decimals beside decimals or integers: `_decimal_holding`, which holds every value of
      each (Arrow gave int64 beside decimal(5, 2) a decimal(20, 2), too narrow for int64's
      extremes, and a decimal256 past 38 digits, which Spark does not have);
    - timestamps of different units: the finer unit, at most microseconds, as Spark reads
      every timestamp (Arrow's nanoseconds failed the read on a value in seconds past
      2262); a column of nanoseconds in every segment stays nanoseconds.
    """
    t = pa.types
    present = [s for s in stored if not t.is_null(s)]
    if t.is_int64(merged):
        return UINT64_WITH_SIGNED if any(t.is_uint64(s) for s in present) else merged
    if t.is_decimal(merged):
        return _decimal_holding(present) or merged
    if t.is_timestamp(merged):
        units = {s.unit for s in present if t.is_timestamp(s)}
        if len(units) < 2:
            return merged
        finest = min(units, key=UNIT_NANOS.__getitem__)
        unit = "us" if finest == "ns" else finest
        return pa.timestamp(unit, tz=merged.tz)
    if t.is_struct(merged):
        children = []
        for child in merged:
            inner = [
                s.field(child.name).type
                for s in present
                if t.is_struct(s) and s.get_field_index(child.name) >= 0
            ]
            children.append(child.with_type(_settled(child.type, inner)))
        return pa.struct(children)
    if t.is_map(merged):
        maps = [s for s in present if t.is_map(s)]
        key = merged.key_field.with_type(_settled(merged.key_type, [s.key_type for s in maps]))
        item = merged.item_field.with_type(_settled(merged.item_type, [s.item_type for s in maps]))
        return pa.map_(key, item, keys_sorted=merged.keys_sorted)
    if t.is_list(merged) or t.is_large_list(merged):
        inner = [s.value_type for s in present if t.is_list(s) or t.is_large_list(s)]
        value = merged.value_field.with_type(_settled(merged.value_type, inner))
        return pa.list_(value) if t.is_list(merged) else pa.large_list(value)
    return merged


DECIMAL_MAX_PRECISION = 38  # decimal128's, and Spark's DecimalType's
# The whole digits an integer type's values take: an unsigned one counts those of the type
# Spark reads it as (uint8 as smallint, uint16 as int, uint32 as bigint, uint64 as
# decimal(20, 0)), so that the Spark connector, which sees only those, merges the same.
_INTEGER_DIGITS = {
    pa.int8(): 3,
    pa.int16(): 5,
    pa.int32(): 10,
    pa.int64(): 19,
    pa.uint8(): 5,
    pa.uint16(): 10,
    pa.uint32(): 19,
    pa.uint64(): 20,
}


def _decimal_holding(types: list[pa.DataType]) -> pa.DataType | None:
    """The decimal that holds every value of `types` (decimals and integers; None for any
    other): as many whole digits as the widest, as many places as the most, and past 38
    digits the places give way, never the whole digits (a value then reads rounded to the
    places kept, half away from zero, as Spark rounds)."""
    whole, scale = 0, 0
    for dtype in types:
        if pa.types.is_decimal(dtype):
            whole = max(whole, dtype.precision - dtype.scale)
            scale = max(scale, dtype.scale)
        elif pa.types.is_integer(dtype):
            whole = max(whole, _INTEGER_DIGITS[dtype])
        else:
            return None
    scale = min(scale, DECIMAL_MAX_PRECISION - whole)
    return pa.decimal128(max(whole + scale, 1), scale)


def _sum_holding(types: list[pa.DataType]) -> pa.DataType | None:
    """The decimal a roll-up's sums of `types` read as (None: as `_decimal_holding` merges
    them). A sum of decimals is Arrow's decimal(38, s) whatever digits its values take (a
    decimal(7, 2) column's sums), and one of integers past int64 is decimal(38, 0): counting
    their 38 digits as whole ones, as a column's, gave decimal(38, 0) beside decimal(38, 2),
    the cents cut. Here such a 38-digit decimal counts places only: the most places of any,
    the whole digits of the integers beside them (19 for int64, 20 for uint64), and past 38
    digits the places give way, never the whole digits. A sum with more whole digits than
    the merged type keeps (some 10**17 rows past int64) fails the read, named."""
    t = pa.types
    present = [s for s in types if not t.is_null(s)]
    sums = [s for s in present if t.is_decimal128(s) and s.precision == DECIMAL_MAX_PRECISION]
    if not sums or not all(t.is_integer(s) or s in sums for s in present):
        return None
    whole = max((_INTEGER_DIGITS[s] for s in present if t.is_integer(s)), default=0)
    scale = min(max(s.scale for s in sums), DECIMAL_MAX_PRECISION - whole)
    return pa.decimal128(DECIMAL_MAX_PRECISION, scale)


def unified_schema(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """`schemas` merged as every reader merges a topic's segment schemas (types widened,
    timestamps of several zones put in UTC, of several units in the finer one up to
    microseconds), for a decoder that must accept exactly the changes the readers merge. A
    column whose types clash raises pa.ArrowTypeError or pa.ArrowInvalid: the readers read
    it as text, which no decoder should bring about. Metadata is kept from the first schema."""
    unique = _in_utc(list(schemas))
    merged = pa.unify_schemas(unique, promote_options="permissive")
    return pa.schema(_settled_fields(merged, unique), metadata=merged.metadata)


def _clashes(schemas: list[pa.Schema], stored: list[pa.Schema]) -> dict[str, tuple[str, ...]]:
    """The columns of `schemas` whose types cannot be merged, in first-seen order, each with
    its types as `stored` holds them (`schemas` are those, timestamps put in UTC)."""
    fields: dict[str, list[pa.Field]] = {}
    for schema in schemas:
        for field in schema:
            fields.setdefault(field.name, []).append(field)
    found = {}
    for name, versions in fields.items():
        try:
            pa.unify_schemas([pa.schema([f]) for f in versions], promote_options="permissive")
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            types = {str(s.field(name).type) for s in stored if name in s.names}
            found[name] = tuple(sorted(types))
    return found


def _in_utc(schemas: list[pa.Schema]) -> list[pa.Schema]:
    """`schemas` with the timestamps of a column stored with different zones, or with and
    without one, in different segments, as timestamps in UTC (each in its own unit), in a
    column as inside a struct, list or map.

    Arrow merges no such types, and the column read as JSON text, when the Spark connector
    reads it as a timestamp: instants, naive values taken as UTC (as plateau takes naive
    datetimes everywhere). Casting a naive or zoned timestamp to UTC keeps its number, so
    the values read are those instants. A column that is something else than a timestamp
    in some segment is left as it is: its types clash anyway.
    """
    types: dict[str, list[pa.DataType]] = {}
    for schema in schemas:
        for field in schema:
            types.setdefault(field.name, []).append(field.type)
    return [
        pa.schema([f.with_type(_utc_if_mixed(f.type, types[f.name])) for f in schema])
        for schema in schemas
    ]


def _utc_if_mixed(dtype: pa.DataType, peers: list[pa.DataType]) -> pa.DataType:
    """`dtype` with each timestamp in it in UTC where the same place of the `peers` (the
    column's types in every segment, `dtype` among them) holds timestamps of several zones."""
    t = pa.types
    present = [p for p in peers if not t.is_null(p)]
    if t.is_timestamp(dtype):
        if not all(t.is_timestamp(p) for p in present) or len({p.tz for p in present}) < 2:
            return dtype
        return pa.timestamp(dtype.unit, tz="UTC")
    if t.is_struct(dtype):
        structs = [p for p in present if t.is_struct(p)]
        return pa.struct(
            [
                child.with_type(
                    _utc_if_mixed(
                        child.type,
                        [
                            s.field(child.name).type
                            for s in structs
                            if s.get_field_index(child.name) >= 0
                        ],
                    )
                )
                for child in dtype
            ]
        )
    if t.is_list(dtype) or t.is_large_list(dtype):
        values = [p.value_type for p in present if t.is_list(p) or t.is_large_list(p)]
        value = dtype.value_field.with_type(_utc_if_mixed(dtype.value_type, values))
        return pa.list_(value) if t.is_list(dtype) else pa.large_list(value)
    if t.is_map(dtype):
        maps = [p for p in present if t.is_map(p)]
        key = dtype.key_field.with_type(_utc_if_mixed(dtype.key_type, [m.key_type for m in maps]))
        item = dtype.item_field.with_type(
            _utc_if_mixed(dtype.item_type, [m.item_type for m in maps])
        )
        return pa.map_(key, item, keys_sorted=dtype.keys_sorted)
    return dtype
