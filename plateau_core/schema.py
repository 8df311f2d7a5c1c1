"""The segment schema: fixed leading columns, the Arrow types plateau stores, fingerprints."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from plateau_core import json_text
from plateau_core.coarsened import coarsened
from plateau_core.errors import InvalidInputError, PlateauError

OFFSET = "offset"
TIMESTAMP = "timestamp"
# What an int64 holds: offsets, epoch milliseconds, and the integers a bloom filter hashes.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
KEY = "key"
HEADERS = "headers"
VALUE = "value"

TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)
FIXED_FIELDS = (pa.field(OFFSET, pa.int64(), nullable=False), pa.field(TIMESTAMP, TIMESTAMP_TYPE))


def _is_supported(dtype: pa.DataType) -> bool:
    """Types that Arrow IPC, Parquet and Spark all read the same way."""
    t = pa.types
    if (
        t.is_boolean(dtype)
        or t.is_null(dtype)
        or t.is_integer(dtype)
        or t.is_float32(dtype)
        or t.is_float64(dtype)
        or t.is_decimal128(dtype)
        or t.is_string(dtype)
        or t.is_large_string(dtype)
        or t.is_binary(dtype)
        or t.is_large_binary(dtype)
        or t.is_date32(dtype)
        or t.is_timestamp(dtype)
    ):
        return True
    if t.is_list(dtype) or t.is_large_list(dtype):
        return _is_supported(dtype.value_type)
    if t.is_struct(dtype):
        return all(_is_supported(dtype.field(i).type) for i in range(dtype.num_fields))
    if t.is_map(dtype):
        return _is_supported(dtype.key_type) and _is_supported(dtype.item_type)
    return False


def normalize_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Check a batch against the segment schema and return it with the fixed columns first.

    Refused, naming the field: a missing or null `offset`/`timestamp`, negative offsets or
    offsets that go backwards inside the batch, a `key`/`headers` column of the wrong type,
    and any column of a type plateau does not store. Timestamps of another unit or zone are
    converted to milliseconds in UTC.
    """
    return normalized(batch)[0]


def normalized(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, str]:
    """`normalize_batch`, and the fingerprint of the result's schema."""
    if not isinstance(batch, pa.RecordBatch):
        raise InvalidInputError(f"expected a pyarrow.RecordBatch, got {type(batch).__name__}")
    plan = _plan(batch.schema)
    offsets = _checked_offsets(batch.column(plan.offset))
    timestamps = _checked_timestamps(batch.column(plan.timestamp))
    columns = [offsets, timestamps, *(batch.column(i) for i in plan.others)]
    return pa.RecordBatch.from_arrays(columns, schema=plan.schema), plan.fingerprint


@dataclass(frozen=True)
class _Plan:
    """How batches of one schema become segment rows: where the fixed columns are, which
    columns follow them, and the schema of the result."""

    offset: int
    timestamp: int
    others: tuple[int, ...]
    schema: pa.Schema
    fingerprint: str


# The schemas checked last, newest first: a writer sees the same few schemas batch after
# batch, and comparing schemas costs far less than checking their fields (or hashing them).
_PLANS: list[tuple[pa.Schema, _Plan]] = []
_PLANS_KEPT = 16


def _plan(schema: pa.Schema) -> _Plan:
    global _PLANS  # noqa: PLW0603 - a cache, rebound whole
    kept = _PLANS
    for seen, plan in kept:
        if seen.equals(schema, check_metadata=True):
            return plan
    plan = _new_plan(schema)
    # Rebound, never changed in place: another thread may be going through the old list.
    _PLANS = [(schema, plan), *kept[: _PLANS_KEPT - 1]]
    return plan


def _new_plan(schema: pa.Schema) -> _Plan:
    names = schema.names
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise InvalidInputError(f"batch has duplicate column names: {dupes}")
    for required in (OFFSET, TIMESTAMP):
        if required not in names:
            raise InvalidInputError(f"batch has no {required!r} column (columns: {names})")
    offset, timestamp = names.index(OFFSET), names.index(TIMESTAMP)
    _check_offset_type(schema.field(offset).type)
    _check_timestamp_type(schema.field(timestamp).type)
    fields: list[pa.Field] = list(FIXED_FIELDS)
    others = []
    for index, field in enumerate(schema):
        if index in (offset, timestamp):
            continue
        _check_field(field)
        others.append(index)
        fields.append(field)
    normal = pa.schema(fields)
    return _Plan(offset, timestamp, tuple(others), normal, fingerprint(normal))


def _check_offset_type(dtype: pa.DataType) -> None:
    if not pa.types.is_integer(dtype):
        raise InvalidInputError(f"column 'offset' must be int64, got {dtype}")


def _check_timestamp_type(dtype: pa.DataType) -> None:
    if not pa.types.is_timestamp(dtype):
        raise InvalidInputError(f"column 'timestamp' must be a timestamp, got {dtype}")


def _checked_offsets(offsets: pa.Array) -> pa.Array:
    _check_offset_type(offsets.type)
    if offsets.type != pa.int64():
        try:
            offsets = offsets.cast(pa.int64())
        except pa.ArrowInvalid as exc:
            raise InvalidInputError(
                f"column 'offset' has values past the largest int64 ({exc})"
            ) from exc
    if offsets.null_count:
        raise InvalidInputError("column 'offset' has nulls")
    if len(offsets) > 0:
        # numpy over the buffer in place: an order of magnitude cheaper than Arrow's compute
        # kernels for the short batches a produce request carries, and for long ones.
        values = offsets.to_numpy(zero_copy_only=True)
        # One row has no order to check: the comparison of empty slices would double what
        # a batch of one record costs here.
        if len(values) > 1 and not (values[1:] >= values[:-1]).all():
            raise InvalidInputError("column 'offset' goes backwards inside the batch")
        # In order, so the first is the least. A negative offset names no segment file
        # recovery knows, and a watermark below 0 means "latest" to a Kafka consumer.
        if values[0] < 0:
            raise InvalidInputError(
                f"column 'offset' is negative ({values[0]}); offsets start at 0"
            )
    return offsets


def _checked_timestamps(timestamps: pa.Array) -> pa.Array:
    _check_timestamp_type(timestamps.type)
    if timestamps.null_count:
        raise InvalidInputError("column 'timestamp' has nulls")
    if timestamps.type != TIMESTAMP_TYPE:
        timestamps = timestamps.cast(TIMESTAMP_TYPE, safe=False)
    return timestamps


def _check_field(field: pa.Field) -> None:
    if field.name == KEY and not (pa.types.is_binary(field.type) or pa.types.is_null(field.type)):
        raise InvalidInputError(f"column 'key' must be binary, got {field.type}")
    if field.name == HEADERS and not (field.type == HEADERS_TYPE or pa.types.is_null(field.type)):
        raise InvalidInputError(f"column 'headers' must be {HEADERS_TYPE}, got {field.type}")
    if not _is_supported(field.type):
        raise InvalidInputError(f"column {field.name!r} has unsupported Arrow type {field.type}")


def fingerprint(schema: pa.Schema) -> str:
    """A short, stable identity of a schema's fields (metadata ignored)."""
    bare = schema.remove_metadata()
    digest = hashlib.sha256(bare.serialize().to_pybytes()).hexdigest()
    return digest[:16]


UINT64_WITH_SIGNED = pa.decimal128(20, 0)


def merge_schemas(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """One schema for segments written over time: fields united, types widened, all nullable
    except the fixed columns, in first-seen order. A column whose types cannot be merged is
    a string column (see `merged_schema`)."""
    return merged_schema(schemas).schema


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


def merged_schema(schemas: Iterable[pa.Schema]) -> MergedSchema:
    stored = list({fingerprint(s): s.remove_metadata() for s in schemas}.values())
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
        f.with_type(
            _settled(f.type, [s.field(f.name).type for s in unique if f.name in s.names])
        ).with_nullable(True)
        for f in merged
        if f.name not in (OFFSET, TIMESTAMP)
    ]
    return MergedSchema(pa.schema(fields), clashes)


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
        finest = min(units, key=_UNIT_NANOS.__getitem__)
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


_UNIT_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
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


def unified_schema(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """`schemas` merged as every reader merges a topic's segment schemas (types widened,
    timestamps of several zones put in UTC, of several units in the finer one up to
    microseconds), for a decoder that must accept exactly the changes the readers merge. A
    column whose types clash raises pa.ArrowTypeError or pa.ArrowInvalid: the readers read
    it as text, which no decoder should bring about. Metadata is kept from the first schema."""
    unique = _in_utc(list(schemas))
    merged = pa.unify_schemas(unique, promote_options="permissive")
    fields = [
        f.with_type(_settled(f.type, [s.field(f.name).type for s in unique if f.name in s.names]))
        for f in merged
    ]
    return pa.schema(fields, metadata=merged.metadata)


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


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly `schema`'s columns: missing ones as nulls, others cast (widened)."""
    if batch.schema.equals(schema):
        return batch
    arrays = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        arrays.append(conform_column(batch.column(index), field.type, name=field.name))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _Segment(Protocol):
    """What names a segment (the manifest's SegmentRecord, which this layer cannot import)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def id(self) -> int: ...
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def path(self) -> str: ...


class UnrepresentableValueError(PlateauError):
    """A stored value that the topic's merged type of its column cannot hold (seconds past
    the year 294247 beside microseconds). The reader adds the topic and the segment."""

    located = False

    def in_segment(self, segment: _Segment) -> UnrepresentableValueError:
        """The error naming the topic and the segment that holds the value."""
        if self.located:
            return self
        found = UnrepresentableValueError(
            f"topic {segment.topic!r} partition {segment.partition}, segment {segment.id} "
            f"(offsets {segment.start_offset}-{segment.end_offset}, {segment.path}): {self}"
        )
        found.located = True
        return found


def conform_column(column: pa.Array, target: pa.DataType, *, name: str = "") -> pa.Array:
    """A stored column as the merged type `target`: widened, or as JSON text when `target`
    is a string over another type (only a column whose stored types clash is). A value the
    merged type cannot hold raises UnrepresentableValueError naming the column `name`."""
    if column.type == target:
        return column
    if pa.types.is_string(target) and not (
        json_text.is_text(column.type) or pa.types.is_null(column.type)
    ):
        return json_text.as_json_text(column)
    try:
        return _widened(column, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UnrepresentableValueError(
            f"column {name!r} holds a value stored as {column.type} that the topic's merged "
            f"type {target} cannot hold: {exc}"
        ) from exc


def _widened(column: pa.Array, target: pa.DataType) -> pa.Array:
    # Integers a topic widened to a double, in a column or inside a struct, list or map, are
    # rounded to the nearest one, as any reader of the merged type does; a checked cast
    # refused every value beyond 2**53 and left the topic unreadable. Only those are cast
    # unchecked: every other change stays checked.
    floated = _floated(column.type, target)
    if floated != column.type:
        column = column.cast(floated, safe=False)
    return coarsened(column, target).cast(target)


def _floated(stored: pa.DataType, target: pa.DataType) -> pa.DataType:
    """`stored` with the integers that `target` has as floating point made so."""
    t = pa.types
    if t.is_integer(stored) and t.is_floating(target):
        return target
    if t.is_struct(stored) and t.is_struct(target):
        return pa.struct(
            [
                f.with_type(_floated(f.type, target.field(f.name).type))
                if target.get_field_index(f.name) >= 0
                else f
                for f in stored
            ]
        )
    if t.is_map(stored) and t.is_map(target):
        key = stored.key_field.with_type(_floated(stored.key_type, target.key_type))
        item = stored.item_field.with_type(_floated(stored.item_type, target.item_type))
        return pa.map_(key, item, keys_sorted=stored.keys_sorted)
    if (t.is_list(stored) or t.is_large_list(stored)) and (
        t.is_list(target) or t.is_large_list(target)
    ):
        value = stored.value_field.with_type(_floated(stored.value_type, target.value_type))
        return pa.list_(value) if t.is_list(stored) else pa.large_list(value)
    return stored
