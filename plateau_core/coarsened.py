"""Stored values made as coarse as a topic's merged type holds them, before the checked cast.

A merged type can hold a segment's values less finely than the segment does (see
plateau_core.schema_merge.merged_schema): nanoseconds beside another unit merge to microseconds,
and a decimal whose places would take precision past 38 digits merges to fewer places. A
checked cast refuses those values; an unchecked one would also let overflows through. So
they are brought to the merged type's grain first, as the Spark connector reads them:
nanoseconds floored to the microsecond, decimals rounded half away from zero (Java's
HALF_UP). The checked cast that follows then refuses only what the merged type cannot hold.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

UNIT_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_FLOOR_UNITS = {"s": "second", "ms": "millisecond", "us": "microsecond"}


def coarsened(column: pa.Array, target: pa.DataType) -> pa.Array:
    """`column` (of its own type) with the timestamps `target` has in a coarser unit floored
    to it and the decimals `target` has with fewer places rounded to them, in a column as
    inside a struct, list or map."""
    if not _needed(column.type, target):
        return column
    t = pa.types
    dtype = column.type
    if t.is_timestamp(dtype):
        # Without its zone: floored as UTC times, whatever the zone's offsets were.
        naive = column.cast(pa.timestamp(dtype.unit))
        unit = _FLOOR_UNITS[target.unit]
        return pc.floor_temporal(naive, unit=unit).cast(dtype)
    if t.is_decimal(dtype):
        rounded = pc.round(column, ndigits=target.scale, round_mode="half_towards_infinity")
        return rounded.cast(dtype)
    nulls = column.is_null() if column.null_count else None
    if t.is_struct(dtype):
        children = [
            coarsened(column.field(i), target.field(f.name).type)
            if target.get_field_index(f.name) >= 0
            else column.field(i)
            for i, f in enumerate(dtype)
        ]
        return pa.StructArray.from_arrays(children, fields=list(dtype), mask=nulls)
    if t.is_map(dtype):
        offsets, keys = _rebased(column, column.keys)
        items = _rebased(column, column.items)[1]
        return pa.MapArray.from_arrays(
            offsets,
            coarsened(keys, target.key_type),
            coarsened(items, target.item_type),
            type=dtype,
            mask=nulls,
        )
    offsets, values = _rebased(column, column.values)
    build = pa.ListArray if t.is_list(dtype) else pa.LargeListArray
    return build.from_arrays(offsets, coarsened(values, target.value_type), type=dtype, mask=nulls)


def _needed(stored: pa.DataType, target: pa.DataType) -> bool:
    """Whether `stored` holds a timestamp or decimal finer than `target` has it."""
    t = pa.types
    if t.is_timestamp(stored) and t.is_timestamp(target):
        return UNIT_NANOS[stored.unit] < UNIT_NANOS[target.unit]
    if t.is_decimal(stored) and t.is_decimal(target):
        return bool(stored.scale > target.scale)
    if t.is_struct(stored) and t.is_struct(target):
        return any(
            _needed(f.type, target.field(f.name).type)
            for f in stored
            if target.get_field_index(f.name) >= 0
        )
    if t.is_map(stored) and t.is_map(target):
        return _needed(stored.key_type, target.key_type) or _needed(
            stored.item_type, target.item_type
        )
    if (t.is_list(stored) or t.is_large_list(stored)) and (
        t.is_list(target) or t.is_large_list(target)
    ):
        return _needed(stored.value_type, target.value_type)
    return False


def _rebased(column: pa.Array, values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """A list or map column's offsets from 0 and the values they span: Arrow builds no
    list with nulls over the offsets of a slice."""
    offsets = column.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    return pc.subtract(offsets, offsets[0]), values.slice(first, last - first)
