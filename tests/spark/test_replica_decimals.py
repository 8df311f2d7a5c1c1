"""Replicas of a topic whose column is int64 in some segments and a decimal in others: the
store reads it as one decimal holding both (plateau_core.schema_merge), and the Parquet and
Iceberg replicas hold that decimal with the values `Store.read` gives, whether the segments
are replicated in one run or the older type was replicated before the other came (a
migration), and read back with Spark."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.types import DecimalType
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as spark_types

from plateau_core import Store
from plateau_spark.replication import ReplicationReport, Replicator, Target
from tests.spark.conftest import write_segments
from tests.spark.iceberg_support import replicator
from tests.support import batch

INT64_EXTREMES = pa.array([2**63 - 1, -(2**63), 0, None], pa.int64())
CENTS = pa.array(
    [Decimal("-999.99"), Decimal("999.99"), Decimal("0.01"), None], pa.decimal128(5, 2)
)
# 20 places beside int64's 19 whole digits: past 38 digits, the places give way (38, 19).
FINE = pa.array(
    [Decimal("1.00000000000000000005"), Decimal("-1.00000000000000000005"), None],
    pa.decimal128(38, 20),
)

# (the column in the older segment, in the newer one, the type the store reads both as)
CASES = {
    "int64-then-decimal-5-2": (INT64_EXTREMES, CENTS, pa.decimal128(21, 2)),
    "decimal-5-2-then-int64": (CENTS, INT64_EXTREMES, pa.decimal128(21, 2)),
    "int64-then-decimal-38-20": (INT64_EXTREMES, FINE, pa.decimal128(38, 19)),
    "decimal-38-20-then-int64": (FINE, INT64_EXTREMES, pa.decimal128(38, 19)),
}


def _seal(store: Store, first: int, column: pa.Array) -> None:
    rows = len(column)
    offsets = range(first, first + rows)
    write_segments(store, "d", 0, [batch(offsets, extra={"x": column})], roll_rows=rows)


def _replicate(kind: str, store: Store, tmp_path: Path, spark: SparkSession) -> ReplicationReport:
    if kind == "iceberg":
        return replicator(store, tmp_path / "warehouse").run_once()
    target = Target.parse(str(tmp_path / "replica"))
    return Replicator(store, target).run_once(spark if kind == "parquet-spark" else None)


def _spark_reads(
    kind: str, tmp_path: Path, store: Store, spark: SparkSession, merged: pa.Decimal128Type
) -> DataFrame:
    """The replica as Spark reads it: the Parquet replica's folder, or the data files of
    the Iceberg table's current snapshot as its schema says (there is no Iceberg runtime
    here; Iceberg's Spark reader reads those files with the table's types)."""
    if kind != "iceberg":
        return spark.read.parquet(str(tmp_path / "replica" / "d"))
    table = replicator(store, tmp_path / "warehouse").table("d")
    assert table.schema().find_field("x").field_type == DecimalType(merged.precision, merged.scale)
    paths = [t.file.file_path for t in table.scan().plan_files()]
    columns = f"offset BIGINT, x DECIMAL({merged.precision}, {merged.scale})"
    return spark.read.schema(columns).parquet(*paths)


@pytest.mark.parametrize("runs", ["one-run", "two-runs"])
@pytest.mark.parametrize("kind", ["parquet-pyarrow", "parquet-spark", "iceberg"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_merged_decimal_replicates_as_the_store_reads_it(
    spark: SparkSession, tmp_path: Path, case: str, kind: str, runs: str
) -> None:
    older, newer, merged = CASES[case]
    store = Store.open(tmp_path / "data")
    _seal(store, 0, older)
    if runs == "two-runs":
        _replicate(kind, store, tmp_path, spark)
    _seal(store, len(older), newer)
    report = _replicate(kind, store, tmp_path, spark)
    if kind != "iceberg":
        # The first run's file holds the older type: rewritten in the merged one.
        assert report.files_migrated == (1 if runs == "two-runs" else 0)

    stored = store.read("d").to_table().sort_by("offset")
    assert stored.schema.field("x").type == merged
    want = stored.column("x").to_pylist()
    frame = _spark_reads(kind, tmp_path, store, spark, merged)
    assert frame.schema["x"].dataType == spark_types.DecimalType(merged.precision, merged.scale)
    got = [r.x for r in frame.orderBy("offset").select("x").collect()]
    assert [r.offset for r in frame.orderBy("offset").select("offset").collect()] == list(
        range(len(older) + len(newer))
    )
    assert got == want
    if kind == "iceberg" and runs == "two-runs":
        # Compaction reads the files of both types into one, as the table's type.
        compacted = replicator(store, tmp_path / "warehouse").maintain()["d"]
        assert compacted.files_rewritten == 2
        frame = _spark_reads(kind, tmp_path, store, spark, merged)
        assert [r.x for r in frame.orderBy("offset").select("x").collect()] == want
    store.close()
