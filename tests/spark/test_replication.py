"""Replication of sealed segments to Parquet: local folders and a real S3-compatible server."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from pyarrow import fs
from pyspark.sql import SparkSession

from plateau_core import RetentionPolicy, SegmentState, Store, StoreLimits
from plateau_core.retention import Retention
from plateau_spark.replication import Replicator, Target, write_task
from tests.spark.conftest import minute_batches, s3_bucket_target, write_segments
from tests.support import batch

DAY_MS = 86_400_000
MIDNIGHT_MS = 1_700_006_400_000  # 2023-11-15T00:00:00Z


def across_midnight(store: Store, topic: str = "t") -> None:
    """Partition 0: six 50-row segments, offsets 0-299, the middle ones spanning midnight
    (rows 0-149 on 2023-11-14, 150-299 on 2023-11-15); partition 1: two segments."""
    times = [MIDNIGHT_MS - 150 * 1000 + i * 1000 for i in range(300)]
    batches = [batch(range(i, i + 50), times=times[i : i + 50]) for i in range(0, 300, 50)]
    write_segments(store, topic, 0, batches, roll_rows=50)
    write_segments(store, topic, 1, minute_batches(1, 2), roll_rows=100)


def keys_of(table_rows: list[tuple[int, int]]) -> Counter[tuple[int, int]]:
    return Counter(table_rows)


def stored_keys(store: Store, topic: str = "t") -> Counter[tuple[int, int]]:
    keys: Counter[tuple[int, int]] = Counter()
    for span in store.spans(topic):
        table = store.read(topic, partitions=[span.partition], columns=["offset"]).to_table()
        keys.update((span.partition, o) for o in table.column("offset").to_pylist())
    return keys


def spark_keys(spark: SparkSession, path: str) -> Counter[tuple[int, int]]:
    rows = spark.read.parquet(path).select("partition", "offset").collect()
    return Counter((r.partition, r.offset) for r in rows)


def test_local_target_layout_idempotence_and_spark_readability(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "data")
    across_midnight(store)
    target_dir = tmp_path / "replica"
    replicator = Replicator(store, Target.parse(f"file://{target_dir}"))

    report = replicator.run_once(spark)
    assert report.segments == 8 and report.rows == 500
    names = sorted(str(p.relative_to(target_dir)) for p in target_dir.rglob("*.parquet"))
    assert names == [
        "t/date=2023-11-14/partition=0/00000000000000000000-00000000000000000149.parquet",
        "t/date=2023-11-14/partition=1/00000000000000000000-00000000000000000199.parquet",
        "t/date=2023-11-15/partition=0/00000000000000000150-00000000000000000299.parquet",
    ]
    # Partition discovery gives back `date` and `partition`; every stored row once.
    df = spark.read.parquet(str(target_dir / "t"))
    assert {"date", "partition", "offset", "timestamp", "key", "value"} <= set(df.columns)
    assert spark_keys(spark, str(target_dir / "t")) == stored_keys(store)
    assert df.filter("date = DATE'2023-11-15'").count() == 150

    spans = {s.partition: s for s in store.spans("t")}
    assert spans[0].replicated_offset == 300 and spans[1].replicated_offset == 200
    states = {s.state for s in store.manifest.segments("t", states=tuple(SegmentState))}
    assert states == {SegmentState.REPLICATED}

    # A second run has nothing to do and changes nothing.
    assert replicator.run_once(spark).segments == 0
    again = sorted(str(p.relative_to(target_dir)) for p in target_dir.rglob("*.parquet"))
    assert again == names
    store.close()


def test_unfinished_run_then_rerun_leaves_no_duplicates(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "data")
    write_segments(store, "t", 0, minute_batches(0, 6), roll_rows=100)
    target = Target.parse(str(tmp_path / "replica"))
    small = Replicator(store, target, file_bytes=1)  # one file per segment
    tasks = small.plan()
    # A run that wrote some files and died before recording anything in the manifest.
    for task in tasks[:4]:
        write_task(task)
    assert all(s.state == SegmentState.SEALED for s in store.manifest.segments("t"))
    # More data arrives and the next run groups differently: every segment in one file.
    write_segments(
        store, "t", 0, [batch(range(600, 700), times=[t for t in range(700)][600:])], 100
    )
    report = Replicator(store, target).run_once(spark)
    assert report.orphans_removed == 4
    assert spark_keys(spark, str(tmp_path / "replica" / "t")) == stored_keys(store)
    store.close()


@pytest.fixture
def s3_target(s3_endpoint: str) -> Target:
    return s3_bucket_target(s3_endpoint)


def s3_keys(target: Target, topic: str = "t") -> Counter[tuple[int, int]]:
    dataset = ds.dataset(
        target.path(topic), filesystem=target.filesystem(), format="parquet", partitioning="hive"
    )
    table = dataset.to_table(columns=["partition", "offset"])
    pairs = zip(
        table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True
    )
    return Counter(pairs)


def test_s3_target_idempotent_then_retention_deletes_only_replicated(
    spark: SparkSession, tmp_path: Path, s3_target: Target
) -> None:
    store = Store.open(tmp_path / "data")
    across_midnight(store)
    # An unfinished run first: files written, nothing recorded.
    for task in Replicator(store, s3_target, file_bytes=1).plan()[:3]:
        write_task(task)
    replicator = Replicator(store, s3_target)
    first = replicator.run_once(spark)
    assert first.files == 3 and first.bytes_written > 0 and first.orphans_removed == 3
    assert s3_keys(s3_target) == stored_keys(store)
    selector = fs.FileSelector(s3_target.path("t"), recursive=True)

    def listing() -> list[str]:
        infos = s3_target.filesystem().get_file_info(selector)
        return sorted(i.path for i in infos if i.type == fs.FileType.File)

    files = listing()
    assert len(files) == 3
    assert replicator.run_once(spark).segments == 0
    assert listing() == files
    assert s3_keys(s3_target) == stored_keys(store)

    # New data not yet replicated; retention that requires replication keeps it.
    write_segments(store, "t", 1, [batch(range(200, 300))], roll_rows=100)
    retention = Retention(
        store,
        default=RetentionPolicy(max_segments=1, require_replicated=True),
        limits=StoreLimits(deletion_grace_s=0),
    )
    retention.run()
    retention.run()
    # max_segments=1 for the topic: all eight replicated segments go, the new one stays.
    left = store.manifest.segments("t")
    assert [(s.partition, s.start_offset, s.state) for s in left] == [(1, 200, SegmentState.SEALED)]
    assert retention.forced_total == 0
    store.close()
