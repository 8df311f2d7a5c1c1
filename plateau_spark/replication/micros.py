"""Timestamps in whole microseconds, as the replicas hold them.

Spark reads no finer unit: its Parquet reader refuses nanosecond timestamps, Iceberg (format
version 2) has none, and the connector reads them floored to the microsecond. A replica
written by pyarrow holds them the same way, so it is readable by Spark and holds what a
Spark-written replica holds; coarser units are left as they are.
"""

from __future__ import annotations

import pyarrow as pa

from plateau_core.coarsened import coarsened


def micros_type(dtype: pa.DataType) -> pa.DataType:
    """`dtype` with its nanosecond timestamps (in a column as inside a struct, list or map)
    in microseconds, zones kept."""
    t = pa.types
    if t.is_timestamp(dtype):
        return pa.timestamp("us", tz=dtype.tz) if dtype.unit == "ns" else dtype
    if t.is_struct(dtype):
        return pa.struct([f.with_type(micros_type(f.type)) for f in dtype])
    if t.is_list(dtype) or t.is_large_list(dtype):
        value = dtype.value_field.with_type(micros_type(dtype.value_type))
        return pa.list_(value) if t.is_list(dtype) else pa.large_list(value)
    if t.is_map(dtype):
        key = dtype.key_field.with_type(micros_type(dtype.key_type))
        item = dtype.item_field.with_type(micros_type(dtype.item_type))
        return pa.map_(key, item, keys_sorted=dtype.keys_sorted)
    return dtype


def in_micros(column: pa.Array) -> pa.Array:
    """`column` as `micros_type` of its type: nanoseconds floored to the microsecond, as the
    connector reads them (Arrow's unchecked cast rounds toward zero, a microsecond later
    than Spark before 1970)."""
    target = micros_type(column.type)
    if target == column.type:
        return column
    return coarsened(column, target).cast(target)
