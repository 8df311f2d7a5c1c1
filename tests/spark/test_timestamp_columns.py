"""A data column stored as timestamps of different zones (or none) and units in different
segments: the store's reader, the connector and the replicas read one timestamp column."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

from plateau_core import Store
from plateau_spark.replication import Replicator, Target
from tests.spark.conftest import write_segments
from tests.spark.iceberg_support import replicator
from tests.support import batch

US = 1_700_000_000_123_456  # 2023-11-14T22:13:20.123456Z in microseconds


def _topic(store: Store, columns: list[pa.Array]) -> None:
    """One segment per column, each in its own partition."""
    for partition, column in enumerate(columns):
        data = batch(range(len(column)), extra={"at": column})
        write_segments(store, "t", partition, [data], roll_rows=len(column))


@pytest.mark.parametrize("writer", ["pyarrow", "spark", "iceberg"])
def test_nanoseconds_replicate_in_microseconds_floored_as_the_connector_reads_them(
    spark: SparkSession, tmp_path: Path, writer: str
) -> None:
    """pyarrow wrote a nanosecond column into the Parquet replica as such, which Spark's
    Parquet reader refuses (PARQUET_TYPE_ILLEGAL), and every Iceberg run failed on a value
    below the microsecond (a checked cast to the table's microseconds). Both hold them in
    microseconds, floored as the connector reads them (before 1970 too)."""
    store = Store.open(tmp_path / "data")
    stored = pa.array([US * 1000 + 789, -1500, None], pa.timestamp("ns", tz="UTC"))
    _topic(store, [stored])
    if writer == "iceberg":
        job = replicator(store, tmp_path / "warehouse")
        job.run_once()
        replica = job.table("t").scan().to_arrow()
    else:
        target = tmp_path / "replica"
        Replicator(store, Target.parse(str(target))).run_once(spark if writer == "spark" else None)
        replica = ds.dataset(str(target / "t"), partitioning="hive").to_table()
        assert spark.read.parquet(str(target / "t")).count() == 3
    replica = replica.sort_by("offset")
    assert replica.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert replica.column("at").cast(pa.int64()).to_pylist() == [US, -2, None]
    store.close()
