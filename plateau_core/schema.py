"""The segment schema: fixed leading columns, the Arrow types plateau stores, fingerprints."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from plateau_core.errors import InvalidInputError

OFFSET = "offset"
TIMESTAMP = "timestamp"
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

    Refused, naming the field: a missing or null `offset`/`timestamp`, offsets that go
    backwards inside the batch, a `key`/`headers` column of the wrong type, and any column
    of a type plateau does not store. Timestamps of another unit or zone are converted to
    milliseconds in UTC.
    """
    if not isinstance(batch, pa.RecordBatch):
        raise InvalidInputError(f"expected a pyarrow.RecordBatch, got {type(batch).__name__}")
    names = batch.schema.names
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise InvalidInputError(f"batch has duplicate column names: {dupes}")
    for required in (OFFSET, TIMESTAMP):
        if required not in names:
            raise InvalidInputError(f"batch has no {required!r} column (columns: {names})")
    offsets = _checked_offsets(batch.column(OFFSET))
    timestamps = _checked_timestamps(batch.column(TIMESTAMP))
    columns: list[pa.Array] = [offsets, timestamps]
    fields: list[pa.Field] = list(FIXED_FIELDS)
    for field in batch.schema:
        if field.name in (OFFSET, TIMESTAMP):
            continue
        _check_field(field)
        columns.append(batch.column(field.name))
        fields.append(field)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def _checked_offsets(offsets: pa.Array) -> pa.Array:
    if not pa.types.is_integer(offsets.type):
        raise InvalidInputError(f"column 'offset' must be int64, got {offsets.type}")
    offsets = offsets.cast(pa.int64())
    if offsets.null_count:
        raise InvalidInputError("column 'offset' has nulls")
    if len(offsets) > 1:
        steps = pc.subtract(offsets.slice(1), offsets.slice(0, len(offsets) - 1))
        if pc.min(steps).as_py() < 0:
            raise InvalidInputError("column 'offset' goes backwards inside the batch")
    return offsets


def _checked_timestamps(timestamps: pa.Array) -> pa.Array:
    if not pa.types.is_timestamp(timestamps.type):
        raise InvalidInputError(f"column 'timestamp' must be a timestamp, got {timestamps.type}")
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


def merge_schemas(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """One schema for segments written over time: fields united, types widened, all nullable
    except the fixed columns, in first-seen order."""
    unique = list({fingerprint(s): s.remove_metadata() for s in schemas}.values())
    if not unique:
        return pa.schema(FIXED_FIELDS)
    merged = pa.unify_schemas(unique, promote_options="permissive")
    fields = [merged.field(OFFSET), merged.field(TIMESTAMP)]
    fields[0] = fields[0].with_nullable(False)
    fields += [f.with_nullable(True) for f in merged if f.name not in (OFFSET, TIMESTAMP)]
    return pa.schema(fields)


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
        column = batch.column(index)
        arrays.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
