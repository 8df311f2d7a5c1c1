"""What the JVM connector adds over reading rows: pruning and pushdown visible in explain(),
aggregates answered from the manifest (and cut segments read while planning), LIMIT, key
filters, codecs, corruption, retention."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn

from plateau_core import RetentionPolicy, RollPolicy, Store, StoreLimits, WriterPolicy
from plateau_core.retention import Retention
from tests.spark.conftest import write_segments
from tests.spark.test_source import at_minute, load, opened, segment
from tests.support import BASE_MS, append_patiently, batch


def plan_of(frame: DataFrame) -> str:
    return str(frame._jdf.queryExecution().executedPlan().toString())


def test_explain_shows_pruned_columns_pushed_filters_and_aggregate(
    spark: SparkSession, minutes_store: Store
) -> None:
    df = load(spark, minutes_store, "t")
    scan = plan_of(df.filter("offset >= 250 AND partition = 1").select("value"))
    assert "ReadSchema: struct<value:binary>" in scan
    assert "PushedFilters: [" in scan and "offset >= 250" in scan and "partition = 1" in scan
    assert "Filter" not in scan.split("BatchScan")[0]  # Spark does not filter again

    counted = df.filter("offset < 500").agg(fn.count("*"), fn.max("offset"), fn.min("timestamp"))
    aggregate = plan_of(counted)
    assert "PushedAggregation: [COUNT(*), MAX(offset), MIN(timestamp)]" in aggregate
    assert "answered from the manifest" in aggregate
    assert counted.first() == (1500, 499, at_minute(0).replace(tzinfo=None))

    assert "PushedLimit: 3" in plan_of(df.select("offset").limit(3))


def test_aggregates_from_the_manifest_equal_those_over_rows(
    spark: SparkSession, minutes_store: Store, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    df = load(spark, minutes_store, "t", traceFile=str(trace))
    spark_side = load(spark, minutes_store, "t", pushdown="false")
    queries = [
        lambda f: f.count(),
        lambda f: f.filter("partition = 2").count(),
        lambda f: f.filter(fn.col("timestamp") >= at_minute(5)).count(),
        lambda f: f.filter("offset >= 1000").count(),  # nothing there: 0, not an empty answer
        lambda f: f.agg(fn.min("offset"), fn.max("offset"), fn.max("timestamp")).first(),
        lambda f: f.filter("offset >= 1000").agg(fn.max("offset")).first(),
        lambda f: sorted(f.groupBy("partition").agg(fn.count("*"), fn.min("timestamp")).collect()),
    ]
    for query in queries:
        assert query(df) == query(spark_side)
    assert not trace.exists()  # none of them opened a segment file

    # Filters that cut a segment: its rows are counted while planning, the others still come
    # from the manifest.
    cut = df.filter("offset >= 150 AND offset < 420")
    assert "answered from the manifest and 6 cut segments read at planning" in plan_of(
        cut.groupBy().count()
    )
    assert cut.count() == 3 * 270
    assert df.filter("offset IN (5, 905)").agg(fn.max("offset")).first()[0] == 905
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert lines and all(line["planning"] for line in lines)  # no task read a segment


def test_aggregates_over_cut_segments_equal_those_over_rows(
    spark: SparkSession, minutes_store: Store, tmp_path: Path
) -> None:
    # Segments of four 4096-row batches (one a millisecond), so the per-batch index skips some.
    for partition in range(2):
        rows = [batch(range(start, start + 4096)) for start in range(0, 4 * 16384, 4096)]
        write_segments(minutes_store, "b", partition, rows, roll_rows=16384)
    trace = tmp_path / "trace.jsonl"
    df = load(spark, minutes_store, "b", traceFile=str(trace))
    spark_side = load(spark, minutes_store, "b", pushdown="false")
    seconds = fn.col("timestamp")
    filters = [
        (seconds >= datetime.fromtimestamp((BASE_MS + 5_000) / 1000, UTC))
        & (seconds < datetime.fromtimestamp((BASE_MS + 30_000.5) / 1000, UTC)),
        fn.col("offset").between(60, 61),
        fn.expr("offset IN (3, 20000, 65535) AND partition = 1"),
        fn.expr("key = CAST('k3' AS BINARY)"),
        fn.expr("offset >= 1000000"),  # nothing: COUNT 0, MIN and MAX null
    ]
    aggregates = [
        fn.count("*"),
        fn.min("offset"),
        fn.max("offset"),
        fn.min("timestamp"),
        fn.max("timestamp"),
        fn.max("partition"),
    ]
    for where in filters:
        pushed = df.filter(where).agg(*aggregates)
        assert "answered from the manifest" in plan_of(pushed), where
        assert pushed.first() == spark_side.filter(where).agg(*aggregates).first(), where
        grouped = df.filter(where).groupBy("partition").agg(fn.count("*"), fn.min("offset"))
        assert "answered from the manifest" in plan_of(grouped), where
        want = spark_side.filter(where).groupBy("partition").agg(fn.count("*"), fn.min("offset"))
        assert sorted(grouped.collect()) == sorted(want.collect()), where
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert all(line["planning"] for line in lines)
    assert any(line["batches_skipped"] > 0 for line in lines)  # the index spared those


def test_an_aggregate_over_too_many_cut_rows_is_left_to_spark(
    spark: SparkSession, minutes_store: Store, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    where = "offset >= 150 AND offset < 420"  # cuts 6 segments, 810 rows
    small = load(spark, minutes_store, "t", traceFile=str(trace), driverAggregateRows="100")
    plan = plan_of(small.filter(where).groupBy().count())
    assert "PlateauScan" in plan and "PushedAggregation" not in plan
    assert small.filter(where).count() == 810
    assert not any(json.loads(line).get("planning") for line in trace.read_text().splitlines())
    # Nor past what one task would read (its batches are checked whole).
    one_task = load(spark, minutes_store, "t", maxPartitionBytes="1000")
    assert "PushedAggregation" not in plan_of(one_task.filter(where).groupBy().count())
    assert "answered from the manifest" in plan_of(one_task.groupBy().count())
    # 0: only what the manifest answers alone is pushed.
    manifest_only = load(spark, minutes_store, "t", driverAggregateRows="0")
    assert "PushedAggregation" not in plan_of(manifest_only.filter(where).groupBy().count())
    assert "answered from the manifest" in plan_of(manifest_only.groupBy().count())
    with pytest.raises((PySparkException, Py4JJavaError), match="driveraggregaterows must be 0"):
        load(spark, minutes_store, "t", driverAggregateRows="-1").count()


def test_limit_reads_only_the_segments_it_needs(
    spark: SparkSession, minutes_store: Store, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    df = load(spark, minutes_store, "t", traceFile=str(trace), maxPartitionBytes="1")
    rows = df.select("partition", "offset").limit(150).collect()
    assert len(rows) == 150
    assert len(opened(trace)) == 2  # 100-row segments: two cover the limit


def test_key_equality_is_applied_by_the_connector(
    spark: SparkSession, minutes_store: Store
) -> None:
    df = load(spark, minutes_store, "t").filter("key = CAST('k3' AS BINARY) AND partition = 0")
    assert "key = " in plan_of(df)
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert offsets == [o for o in range(1000) if o % 7 == 3]
    assert df.count() == len(offsets)
    conflicting = load(spark, minutes_store, "t").filter(
        "key = CAST('k3' AS BINARY) AND key = CAST('k4' AS BINARY)"
    )
    assert conflicting.count() == 0
    # A segment whose keys are all null stores a null-typed column: it matches no key.
    write_segments(minutes_store, "nk", 0, [batch(range(5), extra={"key": pa.nulls(5)})], 5)
    write_segments(minutes_store, "nk", 0, [batch(range(5, 10))], 5)
    keyed = load(spark, minutes_store, "nk").filter("key = CAST('k0' AS BINARY)")
    assert [r.offset for r in keyed.select("offset").collect()] == [7]  # not 0: its key is null
    assert "cut segments read at planning" in plan_of(keyed.groupBy().count())
    assert keyed.count() == 1  # the same, counted while planning


@pytest.mark.parametrize("compression", ["lz4", "zstd", "none"])
def test_every_segment_codec_reads_the_same_rows(
    spark: SparkSession, tmp_path: Path, compression: str
) -> None:
    store = Store.open(tmp_path / compression)
    writer = store.writer(WriterPolicy(fsync=False, compression=compression))
    try:
        writer.acquire("c", 0, roll=RollPolicy(max_rows=5000, max_age_s=3600))
        for start in range(0, 20_000, 5000):
            append_patiently(writer, "c", 0, batch(range(start, start + 5000), value_size=200))
        writer.flush()
    finally:
        writer.close()
    got = load(spark, store, "c").orderBy("offset").toArrow()
    want = store.read("c", partitions=[0]).to_table()
    for name in want.column_names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
    store.close()


def test_a_corrupt_segment_fails_the_query_naming_it(
    spark: SparkSession, minutes_store: Store
) -> None:
    path = minutes_store.data_dir / segment(1, 300)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    df = load(spark, minutes_store, "t")
    with pytest.raises((PySparkException, Py4JJavaError), match=r"0300\.arrow.*is corrupt"):
        df.filter("partition = 1").select("value").collect()
    with pytest.raises((PySparkException, Py4JJavaError), match=r"0300\.arrow.*is corrupt"):
        df.filter("partition = 1 AND offset >= 350").count()  # counted while planning
    assert df.filter("partition = 0").select("value").count() == 1000  # the others still read


def test_retention_during_a_long_query_loses_nothing_it_planned(
    spark: SparkSession, minutes_store: Store
) -> None:
    # One task per segment, run one at a time as the iterator is consumed: the query plans
    # all 30 segments, then retention (in this Python process) retires every one of them
    # while the JVM is still reading.
    df = load(spark, minutes_store, "t", maxPartitionBytes="1").select("partition", "offset")
    rows = df.toLocalIterator()
    seen = [next(rows)]
    retention = Retention(
        minutes_store,
        default=RetentionPolicy(max_age_s=1),
        limits=StoreLimits(deletion_grace_s=60),
    )
    report = retention.run(now=int(time.time() * 1000))
    assert len(report.marked) == 30
    assert minutes_store.manifest.segments("t") == []  # new queries no longer see them
    seen += list(rows)
    assert sorted((r.partition, r.offset) for r in seen) == [
        (p, o) for p in range(3) for o in range(1000)
    ]
    assert load(spark, minutes_store, "t").count() == 0


def test_filtered_then_unfiltered_reads_of_one_dataframe(
    spark: SparkSession, minutes_store: Store
) -> None:
    df = load(spark, minutes_store, "t")
    narrow = df.filter("partition = 1 AND offset < 10").select("offset").collect()
    assert sorted(r.offset for r in narrow) == list(range(10))
    everything = df.select("partition", "offset").collect()
    assert len(everything) == 3000
    assert len({(r.partition, r.offset) for r in everything}) == 3000
    assert len(df.filter("partition = 1 AND offset < 10").collect()) == 10
    assert json.loads(df.schema.json())["fields"][0]["name"] == "partition"


def test_statistics_come_from_the_planned_segments(
    spark: SparkSession, minutes_store: Store
) -> None:
    total = sum(s.size_bytes for s in minutes_store.manifest.segments("t"))
    df = load(spark, minutes_store, "t").filter("partition = 1")
    size = int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    assert 0 < size <= total // 3  # a third of the segments, all columns
    narrow = df.select("offset")
    assert int(narrow._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()) < size
