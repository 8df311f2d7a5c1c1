"""Structured Streaming over plateau topics: watermarks as offsets, availableNow, limits,
consolidation under a running stream."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from plateau_core import Store
from plateau_core.consolidate import Consolidator
from plateau_core.policies import ConsolidatePolicy, RetentionPolicy, StoreLimits
from plateau_core.retention import Retention
from tests.spark.conftest import minute_batches, write_segments
from tests.support import batch


def start_available_now(
    spark: SparkSession, store: Store, out: Path, checkpoint: Path, **options: str
) -> StreamingQuery:
    reader = (
        spark.readStream.format("plateau").option("path", str(store.data_dir)).option("topic", "s")
    )
    if not store.manifest.is_sqlite:
        reader = reader.option("manifest", store.manifest.url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def run_available_now(
    spark: SparkSession, store: Store, out: Path, checkpoint: Path, **options: str
) -> StreamingQuery:
    query = start_available_now(spark, store, out, checkpoint, **options)
    assert query.awaitTermination(180), "the availableNow stream did not finish"
    assert query.exception() is None
    return query


def landed(spark: SparkSession, out: Path) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(out)).select("partition", "offset").collect()
    return sorted((r.partition, r.offset) for r in rows)


@pytest.mark.parametrize("manifest", ["sqlite", "postgresql"])
def test_available_now_reads_exactly_the_new_segments(
    spark: SparkSession, tmp_path: Path, manifest: str, request: pytest.FixtureRequest
) -> None:
    url = None if manifest == "sqlite" else request.getfixturevalue("postgres").new_database()
    store = Store.open(tmp_path / "data", manifest_url=url)
    for partition in (0, 1):
        write_segments(store, "s", partition, minute_batches(partition, 3), roll_rows=100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    first = run_available_now(spark, store, out, checkpoint, maxRecordsPerTrigger="150")
    assert landed(spark, out) == [(p, o) for p in (0, 1) for o in range(300)]
    # 100-row segments under a 150-row limit: one segment per micro-batch.
    batches = [p for p in first.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in batches] == [100] * 6

    # New segments in partition 0 and a partition the stream has not seen yet.
    write_segments(store, "s", 0, [batch(range(300, 400))], roll_rows=100)
    write_segments(store, "s", 2, [batch(range(0, 50))], roll_rows=50)
    run_available_now(spark, store, out, checkpoint)
    expected = [(p, o) for p in (0, 1) for o in range(300)]
    expected += [(0, o) for o in range(300, 400)] + [(2, o) for o in range(50)]
    assert landed(spark, out) == sorted(expected)

    # Nothing new: a third run reads nothing and duplicates nothing.
    third = run_available_now(spark, store, out, checkpoint)
    assert sum(p["numInputRows"] for p in third.recentProgress) == 0
    assert landed(spark, out) == sorted(expected)
    store.close()


def test_a_checkpoint_of_a_store_created_again_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The store's folder deleted and a store created at its path: the checkpoint's offsets
    (300) are the old store's. Taken as the new one's, the stream read nothing of its first
    100 rows and later only its rows from 300, losing 0-299 without a word."""
    data, out, checkpoint = tmp_path / "data", tmp_path / "out", tmp_path / "checkpoint"
    store = Store.open(data)
    write_segments(store, "s", 0, minute_batches(0, 3), roll_rows=100)
    run_available_now(spark, store, out, checkpoint)
    old_id = store.manifest.store_id()
    store.close()
    shutil.rmtree(data)

    store = Store.open(data)
    write_segments(store, "s", 0, [batch(range(100))], roll_rows=100)
    new_id = store.manifest.store_id()
    assert new_id != old_id
    query = start_available_now(spark, store, out, checkpoint)
    with pytest.raises(PySparkException) as raised:
        query.awaitTermination(180)
    said = str(raised.value)
    assert f"its offsets are of store {old_id}" in said and f"is store {new_id}" in said
    assert "belongs to another store" in said and "delete the checkpoint" in said
    assert landed(spark, out) == [(0, o) for o in range(300)]  # the old store's rows only

    run_available_now(spark, store, tmp_path / "again", tmp_path / "checkpoint-again")
    assert landed(spark, tmp_path / "again") == [(0, o) for o in range(100)]
    store.close()


def logged_offsets(checkpoint: Path) -> list[Path]:
    """The checkpoint's offset log entries, oldest first."""
    entries = (p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    return sorted(entries, key=lambda p: int(p.name))


def test_a_checkpoint_from_before_store_ids_reads_on_and_takes_the_store_id(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "data")
    write_segments(store, "s", 0, minute_batches(0, 2), roll_rows=100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, store, out, checkpoint)
    for entry in logged_offsets(checkpoint):  # as written before offsets named their store
        *head, offset = entry.read_text().splitlines()
        held = json.loads(offset)
        assert held.pop("store") == store.manifest.store_id()
        entry.write_text("\n".join([*head, json.dumps(held)]))
        entry.with_name(f".{entry.name}.crc").unlink(missing_ok=True)  # its checksum, now stale

    write_segments(store, "s", 0, [batch(range(200, 250))], roll_rows=50)
    run_available_now(spark, store, out, checkpoint)
    assert landed(spark, out) == [(0, o) for o in range(250)]
    newest = logged_offsets(checkpoint)[-1]
    assert json.loads(newest.read_text().splitlines()[-1]) == {
        "0": 250,
        "store": store.manifest.store_id(),
    }
    store.close()


def test_latest_starts_after_what_is_stored(spark: SparkSession, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    write_segments(store, "s", 0, minute_batches(0, 2), roll_rows=100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, store, out, checkpoint, startingOffsets="latest")
    write_segments(store, "s", 0, [batch(range(200, 230))], roll_rows=30)
    run_available_now(spark, store, out, checkpoint, startingOffsets="latest")
    assert landed(spark, out) == [(0, o) for o in range(200, 230)]
    store.close()


def test_segment_and_byte_limits_take_whole_segments(spark: SparkSession, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    for partition in (0, 1):
        write_segments(store, "s", partition, minute_batches(partition, 3), roll_rows=100)
    size = max(s.size_bytes for s in store.manifest.segments("s"))
    limits = [("maxSegmentsPerTrigger", "2"), ("maxBytesPerTrigger", str(size))]
    # The Kafka source's name for a record limit is taken as one, not ignored.
    limits.append(("maxOffsetsPerTrigger", "150"))
    for name, limit in limits:
        out, checkpoint = tmp_path / name, tmp_path / f"{name}-checkpoint"
        query = run_available_now(spark, store, out, checkpoint, **{name: limit})
        assert landed(spark, out) == [(p, o) for p in (0, 1) for o in range(300)]
        rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
        assert rows == ([200] * 3 if name == "maxSegmentsPerTrigger" else [100] * 6), name
    store.close()


def consolidate(store: Store, target_bytes: int = 1 << 30) -> list[tuple[int, int]]:
    """One consolidation pass over topic `s`; the merged segments' offset spans."""
    policy = ConsolidatePolicy(target_bytes=target_bytes, min_age_s=0)
    report = Consolidator(store, {"s": policy}, fsync=False).run()
    return [(m.start_offset, m.end_offset) for m in report.merged]


@pytest.mark.parametrize(("limit", "batches"), [("300", [300]), ("150", [100, 200])])
def test_a_stream_reads_the_rest_of_segments_consolidation_merged(
    spark: SparkSession, tmp_path: Path, limit: str, batches: list[int]
) -> None:
    """Consolidation merges a segment the stream read with ones it has not: the merged
    segment starts below the stream's offset, and the stream reads the rows past it, once.
    A row limit counts only the rows of a segment still to read."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "s", 0, minute_batches(0, 1), roll_rows=100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, store, out, checkpoint)
    assert landed(spark, out) == [(0, o) for o in range(100)]

    write_segments(store, "s", 0, minute_batches(0, 4)[1:], roll_rows=100)
    size = max(s.size_bytes for s in store.manifest.segments("s"))
    assert consolidate(store, target_bytes=size * 5 // 2) == [(0, 200), (200, 400)]

    query = run_available_now(spark, store, out, checkpoint, maxRecordsPerTrigger=limit)
    assert landed(spark, out) == [(0, o) for o in range(400)]
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0] == batches
    store.close()


def test_a_micro_batch_replayed_after_consolidation_reads_its_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A micro-batch planned before consolidation and run again after it (the query stopped
    before committing it) reads its offsets out of the merged segment."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "s", 0, minute_batches(0, 2), roll_rows=100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, store, out, checkpoint, maxSegmentsPerTrigger="1")
    assert landed(spark, out) == [(0, o) for o in range(200)]
    # Batch 1 read [100, 200); as if the query died before committing it, sink and source.
    for log in (checkpoint / "commits", out / "_spark_metadata"):
        (log / "1").unlink()
        (log / ".1.crc").unlink(missing_ok=True)
    assert landed(spark, out) == [(0, o) for o in range(100)]

    assert consolidate(store) == [(0, 200)]
    query = run_available_now(spark, store, out, checkpoint)
    assert landed(spark, out) == [(0, o) for o in range(200)]
    assert [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0] == [1]
    store.close()


def test_a_stream_fails_on_a_column_widened_after_it_started_then_restarts(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A stream's schema is taken when it is loaded: a segment sealed later with a column in a
    wider type (a JSON field that met a fraction) fails the micro-batch, naming the column,
    rather than reading a double's bits as a bigint. Restarted, it reads on with the new type."""
    store = Store.open(tmp_path / "data")
    ints = {"x": pa.array([1, 2], pa.int64())}
    write_segments(store, "s", 0, [batch(range(2), extra=ints)], roll_rows=2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(frame: DataFrame) -> StreamingQuery:
        return (
            frame.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    def reader() -> DataFrame:
        return (
            spark.readStream.format("plateau")
            .option("path", str(store.data_dir))
            .option("topic", "s")
            .option("maxSegmentsPerTrigger", "1")
            .load()
        )

    stale = reader()
    fractions = {"x": pa.array([1.5, 2.5], pa.float64())}
    write_segments(store, "s", 0, [batch(range(2, 4), extra=fractions)], roll_rows=2)
    query = start(stale)
    with pytest.raises(PySparkException, match=r"column 'x' is double .* planned with bigint"):
        query.awaitTermination(180)
    assert landed(spark, out) == [(0, 0), (0, 1)]  # the batch before the wider segment

    assert start(reader()).awaitTermination(180)
    assert landed(spark, out) == [(0, o) for o in range(4)]
    store.close()


@pytest.mark.parametrize("grace_s", [3600, 0])
def test_a_micro_batch_replayed_after_retention_marked_its_segments_reads_them(
    spark: SparkSession, tmp_path: Path, grace_s: int
) -> None:
    """A micro-batch planned (its offsets logged) but not committed when the query stopped is
    run again on restart. Retention marked its segment `deleting` meanwhile; the file stays
    on disk for the deletion grace precisely so that such a reader still reads it: the
    replayed batch reads its rows instead of leaving a hole in the sink. Once the grace is
    over the rows are gone, and the replayed batch says it skipped them."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "s", 0, minute_batches(0, 3), roll_rows=100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, store, out, checkpoint, maxSegmentsPerTrigger="1")
    assert landed(spark, out) == [(0, o) for o in range(300)]
    # Batch 2 read [200, 300); as if the query died before committing it, sink and source.
    for log in (checkpoint / "commits", out / "_spark_metadata"):
        (log / "2").unlink()
        (log / ".2.crc").unlink(missing_ok=True)

    retention = Retention(
        store,
        default=RetentionPolicy(max_segments=1),
        limits=StoreLimits(deletion_grace_s=grace_s),
    )
    write_segments(store, "s", 0, minute_batches(0, 4)[3:], roll_rows=100)
    assert sorted((s.start_offset, s.end_offset) for s in retention.run().marked) == [
        (0, 100),
        (100, 200),
        (200, 300),
    ]
    query = run_available_now(spark, store, out, checkpoint)
    replayed, after = query.recentProgress[0], query.recentProgress[1]
    assert (replayed["batchId"], after["batchId"]) == (2, 3)
    assert after["numInputRows"] == 100
    if grace_s:
        assert landed(spark, out) == [(0, o) for o in range(400)]
        assert replayed["numInputRows"] == 100
        assert replayed["sources"][0]["metrics"]["skippedOffsets"] == "0"
    else:
        assert landed(spark, out) == [(0, o) for o in range(400) if not 200 <= o < 300]
        assert replayed["numInputRows"] == 0
        assert replayed["sources"][0]["metrics"]["skippedOffsets"] == "100"
    store.close()


def test_a_stream_behind_retention_moves_on_and_says_how_many_offsets_it_skipped(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Segments retention deleted before the stream read them are gone: the stream goes on
    at the oldest stored offset, logs the skipped offsets and counts them in its progress,
    rather than leaving a hole nobody hears of."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "s", 0, minute_batches(0, 1), roll_rows=100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = run_available_now(spark, store, out, checkpoint)
    assert {p["sources"][0]["metrics"].get("skippedOffsets") for p in first.recentProgress} == {"0"}

    write_segments(store, "s", 0, minute_batches(0, 3)[1:], roll_rows=100)
    retention = Retention(
        store, default=RetentionPolicy(max_segments=1), limits=StoreLimits(deletion_grace_s=0)
    )
    assert len(retention.run().deleted) == 2
    query = run_available_now(spark, store, out, checkpoint)
    assert landed(spark, out) == [(0, o) for o in range(100)] + [(0, o) for o in range(200, 300)]
    assert query.lastProgress["sources"][0]["metrics"]["skippedOffsets"] == "100"
    store.close()


def test_a_stream_moves_over_a_quarantined_segment_and_says_so(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A quarantined segment (its file damaged) is never readable again, and the watermark is
    past it: the stream goes on after it, and counts and logs its offsets as skipped."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "s", 0, minute_batches(0, 3), roll_rows=100)
    middle = next(s for s in store.manifest.segments("s") if s.start_offset == 100)
    assert store.manifest.quarantine(middle.id, "checksum mismatch")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = run_available_now(spark, store, out, checkpoint, maxSegmentsPerTrigger="1")
    assert landed(spark, out) == [(0, o) for o in range(300) if not 100 <= o < 200]
    assert query.lastProgress["sources"][0]["metrics"]["skippedOffsets"] == "100"
    store.close()


def test_a_stream_behind_reads_the_rows_of_a_merged_segment_retention_marked(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Consolidation merged segments the stream had not read, then retention marked the merged
    one: the stream reads its offsets from the retired files still in their grace. A row a
    consolidation retired keeps its start offset only in its file's name (its row holds
    -id - 1), so it must not be taken to hold the offsets below its own: one of them, taken
    first, claimed its neighbours' offsets and their rows were neither read nor reported."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "s", 0, minute_batches(0, 1), roll_rows=100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, store, out, checkpoint)
    assert landed(spark, out) == [(0, o) for o in range(100)]

    write_segments(store, "s", 0, minute_batches(0, 3)[1:], roll_rows=100)
    assert consolidate(store) == [(0, 300)]
    write_segments(store, "s", 0, minute_batches(0, 4)[3:], roll_rows=100)
    retention = Retention(
        store, default=RetentionPolicy(max_segments=1), limits=StoreLimits(deletion_grace_s=3600)
    )
    assert [(s.start_offset, s.end_offset) for s in retention.run().marked] == [(0, 300)]

    query = run_available_now(spark, store, out, checkpoint)
    assert landed(spark, out) == [(0, o) for o in range(400)]
    assert query.lastProgress["sources"][0]["metrics"]["skippedOffsets"] == "0"
    store.close()


def test_offsets_retention_deleted_are_reported_beside_rows_consolidation_retired(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The rows a consolidation retired (their start offset held as -id - 1) wait out their
    grace in the partition: the offsets retention deleted before the stream read them are
    still counted and logged as skipped, not hidden by those rows."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "s", 0, minute_batches(0, 1), roll_rows=100)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, store, out, checkpoint)

    write_segments(store, "s", 0, minute_batches(0, 4)[1:], roll_rows=100)
    retention = Retention(
        store, default=RetentionPolicy(max_segments=2), limits=StoreLimits(deletion_grace_s=0)
    )
    assert len(retention.run().deleted) == 2
    assert consolidate(store) == [(200, 400)]

    query = run_available_now(spark, store, out, checkpoint)
    assert landed(spark, out) == [(0, o) for o in range(100)] + [(0, o) for o in range(200, 400)]
    assert query.lastProgress["sources"][0]["metrics"]["skippedOffsets"] == "100"
    store.close()
