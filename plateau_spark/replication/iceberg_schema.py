"""The columns of a topic's Iceberg table, from the store's merged schema, and their evolution.

The table holds the store's result schema with the Kafka partition first. Arrow types that
Iceberg lacks are mapped to the nearest one it has, the same way every run, so a file
written today and one written next year agree:
- timestamps are stored in microseconds (Iceberg has no millisecond timestamps), nanoseconds
  floored as the Spark connector reads them, and those with a zone as timestamptz, in UTC
  (the only zone Iceberg takes; the instants are the same);
- 8- and 16-bit integers widen to int, unsigned ones to the next signed width;
- a column whose type is still null (only nulls seen so far) is left out until it has one.

A data column named like the day partition field ignoring case (`timestamp_day`, a name
Iceberg refuses beside that field) is held with a `_` suffix, and one already so suffixed
(`timestamp_day_`, `Timestamp_Day__`) with one more: the names a run gives depend on no
other column, so a column keeps the field it was created for when such fields come later.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

from plateau_core.conform import conform_column
from plateau_core.errors import PlateauError
from plateau_core.names import fold_case
from plateau_core.schema import OFFSET, TIMESTAMP
from plateau_spark.replication.micros import in_micros
from plateau_spark.replication.widening import widens

PARTITION = "partition"
DAY = "timestamp_day"  # the day(timestamp) partition field
_FIXED = (PARTITION, OFFSET, TIMESTAMP)  # partition sources and the offsets: never replaced


class SchemaConflictError(PlateauError):
    """A topic's schema changed in a way its Iceberg table cannot follow."""


def table_schema(merged: pa.Schema, topic: str) -> pa.Schema:
    """The Arrow schema of the topic's table (and of every data file plateau writes to it)."""
    fields = [pa.field(PARTITION, pa.int32(), nullable=False)]
    for field in merged:
        mapped = _mapped(field.type, topic, field.name)
        if mapped is not None:
            nullable = field.name != OFFSET
            fields.append(pa.field(table_column(field.name), mapped, nullable=nullable))
    return pa.schema(fields)


def table_column(name: str) -> str:
    """The table column holding the store's column `name`."""
    folded = fold_case(name)
    if folded.startswith(DAY) and not folded[len(DAY) :].strip("_"):
        return f"{name}_"
    return name


def _mapped(dtype: pa.DataType, topic: str, name: str) -> pa.DataType | None:
    t = pa.types
    if t.is_null(dtype):
        return None
    if t.is_timestamp(dtype):
        # Iceberg's timestamptz holds instants and takes only UTC: a column of another zone
        # holds the same instants in it, as Spark (whose timestamps carry no zone) reads it.
        return pa.timestamp("us", tz=None if dtype.tz is None else "UTC")
    if t.is_int8(dtype) or t.is_int16(dtype) or t.is_uint8(dtype) or t.is_uint16(dtype):
        return pa.int32()
    if t.is_uint32(dtype):
        return pa.int64()
    if t.is_uint64(dtype):
        raise SchemaConflictError(
            f"topic {topic!r}: field {name!r} is uint64, which no Iceberg type holds "
            "(decode it as int64 or decimal)"
        )
    if t.is_large_string(dtype):
        return pa.string()
    if t.is_large_binary(dtype):
        return pa.binary()
    if t.is_list(dtype) or t.is_large_list(dtype):
        inner = _mapped(dtype.value_type, topic, f"{name}.element")
        return None if inner is None else pa.list_(inner)
    if t.is_struct(dtype):
        children = []
        for i in range(dtype.num_fields):
            child = dtype.field(i)
            mapped = _mapped(child.type, topic, f"{name}.{child.name}")
            if mapped is not None:
                children.append(pa.field(child.name, mapped))
        return pa.struct(children) if children else None
    if t.is_map(dtype):
        key = _mapped(dtype.key_type, topic, f"{name}.key")
        item = _mapped(dtype.item_type, topic, f"{name}.value")
        return None if key is None or item is None else pa.map_(key, item)
    return dtype


@dataclass(frozen=True)
class Evolution:
    """How a table's columns follow the store's schema (check_evolution)."""

    # Added, or promoted by Iceberg in place (int to long).
    added: list[str] = dataclasses.field(default_factory=list)
    # The store widened them in a way Iceberg has no promotion for (long to double): each is
    # replaced by a new column of the type, and the data files holding it are rewritten.
    replaced: dict[str, pa.DataType] = dataclasses.field(default_factory=dict)


def check_evolution(current: pa.Schema, wanted: pa.Schema, topic: str) -> Evolution:
    """How the table's `current` columns take the store's `wanted` ones: the columns
    `wanted` adds or widens as Iceberg promotes types (int to long, float to double, a wider
    decimal), and those it widens as the store's readers do but Iceberg does not promote
    (long to double, what an inferred json integer that met a fraction becomes; a timestamp
    put in UTC), which are replaced. A column the table holds wider than the store does
    (another store widened it) is left as it is: files are written in the table's type
    (in_table_types).

    Raises SchemaConflictError, naming every such field, when a column the table has would
    change in any other way.
    """
    evolution = Evolution()
    refused = []
    for wanted_field in wanted:
        index = current.get_field_index(wanted_field.name)
        if index < 0:
            evolution.added.append(wanted_field.name)
            continue
        have, want = current.field(index).type, wanted_field.type
        if have.equals(want) or widens(want, have, topic, wanted_field.name):
            continue
        if _same_or_promoted(have, want):
            evolution.added.append(wanted_field.name)
        elif widens(have, want, topic, wanted_field.name) and wanted_field.name not in _FIXED:
            evolution.replaced[wanted_field.name] = want
        else:
            refused.append(
                f"field {wanted_field.name!r} is {want} in the store but {have} in its "
                f"Iceberg table, and Iceberg cannot change {have} to {want}"
            )
    if refused:
        raise SchemaConflictError(
            f"topic {topic!r}: {'; '.join(refused)}. Its segments stay sealed, none of them "
            "in the table, until it can take them: replicate the new data to another "
            "namespace (replication.iceberg.namespace)"
        )
    return evolution


def in_table_types(wanted: pa.Schema, current: pa.Schema, topic: str) -> pa.Schema:
    """`wanted` (of `topic`) with the table's type for each column the table holds wider
    (another store widened it): the types this store's data files are written in."""
    fields = []
    for wanted_field in wanted:
        index = current.get_field_index(wanted_field.name)
        have = current.field(index).type if index >= 0 else None
        if have is not None and widens(wanted_field.type, have, topic, wanted_field.name):
            fields.append(wanted_field.with_type(have))
        else:
            fields.append(wanted_field)
    return pa.schema(fields, metadata=wanted.metadata)


def _same_or_promoted(have: pa.DataType, want: pa.DataType) -> bool:
    if have.equals(want):
        return True
    t = pa.types
    if t.is_int32(have) and t.is_int64(want):
        return True
    if t.is_float32(have) and t.is_float64(want):
        return True
    if t.is_decimal(have) and t.is_decimal(want):
        return bool(have.scale == want.scale and want.precision >= have.precision)
    if t.is_struct(have) and t.is_struct(want):
        have_fields = {have.field(i).name: have.field(i).type for i in range(have.num_fields)}
        for i in range(want.num_fields):
            child = want.field(i)
            old = have_fields.get(child.name)
            if old is not None and not _same_or_promoted(old, child.type):
                return False
        return True
    if (t.is_list(have) and t.is_list(want)) or (t.is_map(have) and t.is_map(want)):
        return _same_or_promoted(have.value_type, want.value_type) and (
            not t.is_map(have) or have.key_type.equals(want.key_type)
        )
    return False


def iceberg_arrow_schema(iceberg_schema: Schema) -> pa.Schema:
    """An Iceberg schema as plain Arrow (field ids dropped), comparable with table_schema()."""
    arrow = schema_to_pyarrow(iceberg_schema, include_field_ids=False)
    return pa.schema([pa.field(f.name, _plain(f.type), f.nullable) for f in arrow])


def _plain(dtype: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(dtype):
        return pa.string()
    if pa.types.is_large_binary(dtype):
        return pa.binary()
    if pa.types.is_large_list(dtype) or pa.types.is_list(dtype):
        return pa.list_(_plain(dtype.value_type))
    if pa.types.is_struct(dtype):
        return pa.struct(
            [
                pa.field(dtype.field(i).name, _plain(dtype.field(i).type))
                for i in range(dtype.num_fields)
            ]
        )
    if pa.types.is_map(dtype):
        return pa.map_(_plain(dtype.key_type), _plain(dtype.item_type))
    return dtype


def to_table_batch(batch: pa.RecordBatch, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """A segment batch with the table's columns: the partition added, types mapped, columns
    the batch lacks as nulls."""
    arrays: list[pa.Array] = [pa.array([partition] * batch.num_rows, pa.int32())]
    indexes = {table_column(name): i for i, name in enumerate(batch.schema.names)}
    for field in list(schema)[1:]:
        index = indexes.get(field.name, -1)
        if index < 0:
            arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        # As the store reads it: a clashed column as JSON text, integers widened to a double
        # rounded (a checked cast refused those beyond 2**53, and every run failed). Text
        # keeps a clashed column's nanoseconds; elsewhere they are floored as Spark reads
        # them (a checked cast refused any below the microsecond, and every run failed).
        column = batch.column(index)
        if not pa.types.is_string(field.type):
            column = in_micros(column)
        arrays.append(conform_column(column, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
