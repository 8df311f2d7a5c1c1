"""Which type changes of a column the replicas follow, and the rewrite of a Parquet file
whose columns are of an older, narrower type.

A topic's column can hold different types over time (an inferred json integer that met a
fraction: int64 in older segments, double in newer ones) and the store's readers merge them
(plateau_core.schema_merge.merged_schema). A replica written before the change holds the old type;
it is migrated to the new one only where that is a widening the store's readers do
themselves (integers to wider integers or to floating point, float to double, timestamps to
a finer unit or to UTC, the same inside a struct, list or map, a struct gaining children):
a value read from the replica is then what the store reads. Any other change (a clash of
types the store reads as JSON text) is not a widening, and the replicas keep what they do
with it. A roll-up topic's `sum_*` decimals merge by their places, not their digits
(plateau_core.rollup.rollup_sum), so the topic and the column are part of the question:
decimal(38, 0) sums widen to decimal(38, 2) there, where a raw topic's decimal(38, 2)
column widens to decimal(38, 0) (every whole digit kept).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from plateau_core.conform import conform_column
from plateau_core.rollup import rollup_sum
from plateau_core.schema import FIXED_FIELDS
from plateau_core.schema_merge import merged_schema

# Kept out of a rewritten file's metadata: pyarrow writes its own Arrow schema, and Spark
# takes its row schema from this key before the file's Parquet types, so a stale one would
# have Spark read the new doubles as the old bigints.
_STALE_METADATA = (b"ARROW:schema", b"org.apache.spark.sql.parquet.row.metadata")
_PROBE = "probe"


def plain(dtype: pa.DataType) -> pa.DataType:
    """`dtype` as Parquet and Iceberg tell it apart: large and dictionary types as their
    plain ones, nested fields nullable and named as Arrow names them by default."""
    t = pa.types
    if t.is_dictionary(dtype):
        return plain(dtype.value_type)
    if t.is_large_string(dtype):
        return pa.string()
    if t.is_large_binary(dtype):
        return pa.binary()
    if t.is_list(dtype) or t.is_large_list(dtype):
        return pa.list_(plain(dtype.value_type))
    if t.is_struct(dtype):
        return pa.struct([pa.field(f.name, plain(f.type)) for f in dtype])
    if t.is_map(dtype):
        return pa.map_(plain(dtype.key_type), plain(dtype.item_type))
    return dtype


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    return bool(plain(a).equals(plain(b)))


def widens(old: pa.DataType, new: pa.DataType, topic: str, column: str) -> bool:
    """Whether the store's readers, merging `column` of `topic` of type `old` with one of
    type `new`, read both as `new` (and `new` differs from `old`)."""
    a, b = plain(old), plain(new)
    if a.equals(b):
        return False
    # A roll-up's sum merges by its name (schema_merge); any other column merges alike
    # under the probe's name, which no name of plateau's own columns (offset) can clash with.
    name = column if rollup_sum(topic, column) else _PROBE
    merged = merged_schema([_probe(name, a), _probe(name, b)], topic)
    return not merged.clashes and bool(plain(merged.schema.field(name).type).equals(b))


def _probe(name: str, dtype: pa.DataType) -> pa.Schema:
    return pa.schema([*FIXED_FIELDS, pa.field(name, dtype)])


def casts_for(held: pa.Schema, goal: pa.Schema, topic: str) -> dict[str, pa.DataType]:
    """The columns of a file of `topic` of schema `held` that `goal` widens, with their
    `goal` type."""
    casts = {}
    for field in held:
        index = goal.get_field_index(field.name)
        if index >= 0 and widens(field.type, goal.field(index).type, topic, field.name):
            casts[field.name] = goal.field(index).type
    return casts


def described(held: pa.Schema, casts: Mapping[str, pa.DataType]) -> dict[str, str]:
    """`{"latency": "int64 -> double"}`: what a rewrite changes, for logs and errors."""
    return {name: f"{held.field(name).type} -> {dtype}" for name, dtype in casts.items()}


def rewrite_parquet(
    source: pq.ParquetFile, out: IO[bytes], replacements: Mapping[str, pa.Field], compression: str
) -> None:
    """Write `source`'s rows to `out`, each column named in `replacements` as that field
    (its values cast as the store's readers cast them: integers made doubles rounded to the
    nearest one), the other columns, the row order and the row groups as they are."""
    held = source.schema_arrow
    fields = [replacements.get(f.name, f) for f in held]
    metadata = {k: v for k, v in (held.metadata or {}).items() if k not in _STALE_METADATA}
    schema = pa.schema(fields, metadata=metadata or None)
    with pq.ParquetWriter(out, schema, compression=compression) as writer:
        for group in range(source.num_row_groups):
            table = source.read_row_group(group)
            batches = [
                pa.RecordBatch.from_arrays(
                    [
                        conform_column(column, field.type) if field.name in replacements else column
                        for field, column in zip(schema, batch.columns, strict=True)
                    ],
                    schema=schema,
                )
                for batch in table.to_batches()
            ]
            writer.write_table(pa.Table.from_batches(batches, schema), row_group_size=len(table))
