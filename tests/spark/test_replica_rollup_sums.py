"""Replicas of a roll-up topic whose `sum_*` column is decimal(38, 0) in some segments (an
integer field's sums past int64) and decimal(38, 2) in others (a decimal(7, 2) field's): the
store reads both as decimal(38, 2), by their places, and so do the Parquet and Iceberg
replicas, whether the segments are replicated in one run or the decimal(38, 0) sums were
replicated before the others came (a migration to decimal(38, 2), not from it)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.types import DecimalType
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as spark_types
from structlog.testing import capture_logs

from plateau_core import Store
from plateau_spark.replication import ReplicationReport, Replicator, Target
from tests.core.test_rollup_sum_places import BIG, CENTS, ROLLUP, _seal_each
from tests.spark.iceberg_support import replicator

SUMS = pa.decimal128(38, 2)


def _replicate(kind: str, store: Store, tmp_path: Path, spark: SparkSession) -> ReplicationReport:
    if kind == "iceberg":
        return replicator(store, tmp_path / "warehouse").run_once()
    target = Target.parse(str(tmp_path / "replica"))
    return Replicator(store, target).run_once(spark if kind == "parquet-spark" else None)


def _replica(kind: str, tmp_path: Path, store: Store, spark: SparkSession) -> DataFrame:
    """The roll-up topic's replica as Spark reads it: the Parquet replica's folder (each of
    its files holding the sums as decimal(38, 2)), or the data files of the Iceberg table's
    current snapshot with the table's types (there is no Iceberg runtime here)."""
    if kind != "iceberg":
        folder = tmp_path / "replica" / ROLLUP
        files = sorted(folder.rglob("*.parquet"))
        assert files
        assert {pq.read_schema(f).field("sum_amount").type for f in files} == {SUMS}
        return spark.read.parquet(str(folder))
    table = replicator(store, tmp_path / "warehouse").table(ROLLUP)
    assert table.schema().find_field("sum_amount").field_type == DecimalType(38, 2)
    paths = [t.file.file_path for t in table.scan().plan_files()]
    return spark.read.schema("offset BIGINT, sum_amount DECIMAL(38, 2)").parquet(*paths)


@pytest.mark.parametrize("runs", ["one-run", "two-runs"])
@pytest.mark.parametrize("kind", ["parquet-pyarrow", "parquet-spark", "iceberg"])
def test_rollup_sums_with_places_replicate_as_the_store_reads_them(
    spark: SparkSession, tmp_path: Path, kind: str, runs: str
) -> None:
    with Store.open(tmp_path / "data") as store:
        # Sums past int64 (decimal(38, 0)), then sums within it (int64).
        _seal_each(store, [pa.array([BIG, BIG], pa.int64()), pa.array([3, 4], pa.int64())])
        if runs == "two-runs":
            _replicate(kind, store, tmp_path, spark)
        _seal_each(store, [pa.array([Decimal("1.25"), Decimal("-2.50")], CENTS)], at=4)
        with capture_logs() as logged:
            _replicate(kind, store, tmp_path, spark)
        if kind != "iceberg" and runs == "two-runs":
            # The first run's two files hold decimal(38, 0): rewritten in decimal(38, 2).
            migrated = [
                e["columns"]
                for e in logged
                if e["event"] == "replica_file_migrated" and e["topic"] == ROLLUP
            ]
            assert migrated == [{"sum_amount": "decimal128(38, 0) -> decimal128(38, 2)"}] * 2

        stored = store.read(ROLLUP).to_table()
        assert stored.schema.field("sum_amount").type == SUMS
        want = sorted((r["offset"], r["sum_amount"]) for r in stored.to_pylist())
        frame = _replica(kind, tmp_path, store, spark)
        assert frame.schema["sum_amount"].dataType == spark_types.DecimalType(38, 2)
        got = sorted(
            (r.offset, r.sum_amount) for r in frame.select("offset", "sum_amount").collect()
        )
        assert got == want
        assert {s for _, s in got} == {Decimal(2 * BIG), Decimal(7), Decimal("-1.25")}
        if kind == "iceberg" and runs == "two-runs":
            # Compaction reads the replaced column's copies and the new files as one type.
            replicator(store, tmp_path / "warehouse").maintain()
            again = _replica(kind, tmp_path, store, spark).select("offset", "sum_amount")
            assert sorted((r.offset, r.sum_amount) for r in again.collect()) == want
