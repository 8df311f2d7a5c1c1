"""Segment schemas as Spark sees them, and the exact Arrow types Spark expects back."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import IntegerType, StructField, StructType

from plateau_core.errors import InvalidInputError

PARTITION = "partition"
SPARK_TIMEZONE = "UTC"


def spark_compatible(dtype: pa.DataType) -> pa.DataType:
    """`dtype` widened to an Arrow type Spark has: unsigned integers grow (uint64 becomes
    decimal(20, 0), exact), timestamps become microseconds (zone kept or absent)."""
    t = pa.types
    if t.is_uint8(dtype):
        return pa.int16()
    if t.is_uint16(dtype):
        return pa.int32()
    if t.is_uint32(dtype):
        return pa.int64()
    if t.is_uint64(dtype):
        return pa.decimal128(20, 0)
    if t.is_timestamp(dtype):
        return pa.timestamp("us", tz=SPARK_TIMEZONE if dtype.tz is not None else None)
    if t.is_list(dtype) or t.is_large_list(dtype):
        return pa.list_(spark_compatible(dtype.value_type))
    if t.is_struct(dtype):
        return pa.struct(
            [
                dtype.field(i).with_type(spark_compatible(dtype.field(i).type))
                for i in range(dtype.num_fields)
            ]
        )
    if t.is_map(dtype):
        return pa.map_(spark_compatible(dtype.key_type), spark_compatible(dtype.item_type))
    return dtype


def spark_schema(segment_schema: pa.Schema) -> StructType:
    """The DataFrame schema of a topic: `partition`, then the merged segment columns."""
    if PARTITION in segment_schema.names:
        raise InvalidInputError(
            f"the topic has a column named {PARTITION!r}, which the Spark source uses for the "
            "Kafka partition; rename it in the producer or the mapping"
        )
    widened = pa.schema(
        [f.with_type(spark_compatible(f.type)) for f in segment_schema]  # keeps nullability
    )
    converted = from_arrow_schema(widened, prefer_timestamp_ntz=True)
    return StructType([StructField(PARTITION, IntegerType(), False), *converted.fields])


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema `read()` must yield for a DataFrame schema, field for field."""
    return to_arrow_schema(schema, timezone=SPARK_TIMEZONE)
