"""The segment schema: fixed leading columns, the Arrow types plateau stores, fingerprints."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa

from plateau_core.errors import InvalidInputError
from plateau_core.stored_names import write_names

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
    any column of a type plateau does not store, and a data column named like one of
    plateau's columns beside its suffixed name (`partition` and `partition_`:
    plateau_core.stored_names.TwinFieldsError). Such a data column alone is renamed to its
    suffixed name (`Timestamp` to `Timestamp_`). Timestamps of another unit or zone are
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
    # Under the names its readers read it by: a batch built by hand (not by a decoder) may
    # hold a data column `partition` or `Timestamp`.
    stored = write_names(names)
    for index, field in enumerate(schema):
        if index in (offset, timestamp):
            continue
        _check_field(field)
        others.append(index)
        fields.append(field if stored[index] == field.name else field.with_name(stored[index]))
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
