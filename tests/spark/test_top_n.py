"""`ORDER BY timestamp [DESC] LIMIT k` through the connector: pushed as a TopN, the newest (or
oldest) segments are read and planning stops once k rows are certain; the rows are those of
a full sort."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn

from plateau_core import Store
from tests.spark.test_connector import plan_of
from tests.spark.test_source import load, opened, segment


def _times(frame: DataFrame) -> list[object]:
    return [row.timestamp for row in frame.select("timestamp").collect()]


def test_newest_rows_read_only_the_newest_segments(
    spark: SparkSession, minutes_store: Store, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    df = load(spark, minutes_store, "t", traceFile=str(trace), maxPartitionBytes="1")
    spark_side = load(spark, minutes_store, "t", pushdown="false")
    newest = df.orderBy(fn.col("timestamp").desc()).limit(100)
    assert "PushedTopN: timestamp DESC LIMIT 100" in plan_of(newest)
    assert _times(newest) == _times(spark_side.orderBy(fn.col("timestamp").desc()).limit(100))
    # Minute 9 of each partition overlap in time; the three hold the newest 100 rows.
    assert opened(trace) == sorted(segment(p, 900) for p in range(3))

    trace.unlink()
    oldest = df.orderBy("timestamp").limit(250)
    assert "PushedTopN: timestamp ASC LIMIT 250" in plan_of(oldest)
    assert _times(oldest) == _times(spark_side.orderBy("timestamp").limit(250))
    # Minute 0 of the three partitions holds 300 rows, all before minute 1: enough.
    assert opened(trace) == sorted(segment(p, 0) for p in range(3))


def test_top_n_with_filters_and_other_sorts(
    spark: SparkSession, minutes_store: Store, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    df = load(spark, minutes_store, "t", traceFile=str(trace), maxPartitionBytes="1")
    spark_side = load(spark, minutes_store, "t", pushdown="false")
    for query in [
        lambda f: f.filter("partition = 1").orderBy(fn.col("timestamp").desc()).limit(150),
        lambda f: f.filter("offset < 450").orderBy(fn.col("timestamp").desc()).limit(10),
        lambda f: f.orderBy(fn.col("timestamp").desc()).limit(3000),  # more than there is
        lambda f: f.orderBy(fn.col("offset").desc()).limit(5),  # not a TopN plateau takes
    ]:
        assert _times(query(df)) == _times(query(spark_side))
    trace.unlink(missing_ok=True)
    df.filter("partition = 1").orderBy(fn.col("timestamp").desc()).limit(150).collect()
    assert opened(trace) == [segment(1, 800), segment(1, 900)]
    assert "PushedTopN" not in plan_of(df.orderBy(fn.col("offset").desc()).limit(5))
