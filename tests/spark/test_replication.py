"""Replication of sealed segments to Parquet: local folders and a real S3-compatible server."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyarrow import fs
from pyspark.sql import SparkSession
from structlog.testing import capture_logs

from plateau_core import RetentionPolicy, SegmentState, Store, StoreLimits
from plateau_core.rebuild import rebuild_manifest
from plateau_core.retention import Retention
from plateau_spark.errors import ReplicaOwnerError, ReplicationFailedError
from plateau_spark.replicate import replicate
from plateau_spark.replication import (
    ReplicationReport,
    Replicator,
    Target,
    TargetError,
    write_task,
)
from plateau_spark.replication.owner import MARKER_FILE, OffsetOrigins
from tests.spark.conftest import minute_batches, s3_bucket_target, write_segments
from tests.support import BASE_MS, batch

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


def keep_one_replicated(store: Store) -> Retention:
    """Two passes of retention keeping one segment per topic, and only replicated ones
    going (without a grace)."""
    retention = Retention(
        store,
        default=RetentionPolicy(max_segments=1, require_replicated=True),
        limits=StoreLimits(deletion_grace_s=0),
    )
    retention.run()
    retention.run()
    return retention


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
    assert [f.rsplit("/", 1)[1] for f in files if not f.endswith(".parquet")] == [
        "_plateau_schema",
        "_plateau_store_id",
    ]
    assert len(files) == 5
    assert replicator.run_once(spark).segments == 0
    assert listing() == files
    assert s3_keys(s3_target) == stored_keys(store)

    # New data not yet replicated; retention that requires replication keeps it.
    write_segments(store, "t", 1, [batch(range(200, 300))], roll_rows=100)
    retention = keep_one_replicated(store)
    # max_segments=1 for the topic: all eight replicated segments go, the new one stays.
    left = store.manifest.segments("t")
    assert [(s.partition, s.start_offset, s.state) for s in left] == [(1, 200, SegmentState.SEALED)]
    assert retention.forced_total == 0
    store.close()


def replica_values(target: Target, topic: str = "t") -> list[bytes]:
    dataset = ds.dataset(target.path(topic), filesystem=target.filesystem(), format="parquet")
    return sorted(dataset.to_table(columns=["value"]).column("value").to_pylist())


def store_created_again(path: Path, store: Store) -> Store:
    """The store at `path` lost with its data folder and created there again: a new id."""
    store.close()
    shutil.rmtree(path)
    return Store.open(path)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_produced_topic_of_a_store_created_again_leaves_the_old_replica_whole(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """A store created again at its data folder numbers a produced topic's offsets from 0
    again: the same file names and offsets as the replica's, other records. The topic is
    refused, naming both stores; the replica keeps its files, the segments stay unreplicated,
    and the store's other topics are replicated."""
    target = (
        request.getfixturevalue("s3_target")
        if where == "s3"
        else Target.parse(str(tmp_path / "replica"))
    )
    old = Store.open(tmp_path / "data")
    write_segments(old, "t", 0, minute_batches(0, 3), roll_rows=100)
    assert Replicator(old, target).run_once().segments == 3
    old_id, before = old.manifest.store_id(), replica_values(target)
    store = store_created_again(tmp_path / "data", old)
    different = [batch(range(i, i + 100), value_size=9) for i in (0, 100)]
    write_segments(store, "t", 0, different, roll_rows=100)
    write_segments(store, "u", 0, minute_batches(0, 1), roll_rows=100)

    with capture_logs() as logs, pytest.raises(ReplicaOwnerError) as refused:
        Replicator(store, target).run_once()
    assert set(refused.value.refused) == {"t"}
    message = str(refused.value)
    assert old_id in message and store.manifest.store_id() in message
    assert "another target" in message and "remove its replica" in message
    [event] = [e for e in logs if e["event"] == "replica_of_another_store"]
    assert event["log_level"] == "error"
    assert (event["topic"], event["replica_store_id"]) == ("t", old_id)
    assert event["store_id"] == store.manifest.store_id() and target.uri in event["target"]
    assert replica_values(target) == before
    assert s3_keys(target) == Counter({(0, o): 1 for o in range(300)})
    assert {s.state for s in store.manifest.segments("t")} == {SegmentState.SEALED}
    assert s3_keys(target, "u") == stored_keys(store, "u")
    assert {s.state for s in store.manifest.segments("u", states=tuple(SegmentState))} == {
        SegmentState.REPLICATED
    }
    store.close()


def test_a_consumed_topic_of_a_store_created_again_is_replicated_as_before(
    tmp_path: Path,
) -> None:
    """A consumed topic's offsets are Kafka's: the same records whichever store holds
    them, so a store created again replicates them over the replica's as it always did."""
    target = Target.parse(str(tmp_path / "replica"))
    old = Store.open(tmp_path / "data")
    old.manifest.record_source_topic("t", 0, "clicks", "id-1")
    write_segments(old, "t", 0, minute_batches(0, 3), roll_rows=100)
    Replicator(old, target).run_once()
    store = store_created_again(tmp_path / "data", old)
    store.manifest.record_source_topic("t", 0, "clicks", "id-1")
    write_segments(store, "t", 0, minute_batches(0, 3)[1:], roll_rows=100)
    assert Replicator(store, target).run_once().segments == 2
    assert s3_keys(target) == Counter({(0, o): 1 for o in range(300)})
    assert not (tmp_path / "replica" / "t" / "_plateau_store_id").exists()
    store.close()


def test_a_replica_recording_no_store_is_adopted_by_the_first_store_replicating_into_it(
    tmp_path: Path,
) -> None:
    """A Parquet replica written before store ids were recorded has no marker: the store
    replicating into it next writes its own, and the replica is that store's from then on."""
    store = Store.open(tmp_path / "data")
    target = Target.parse(str(tmp_path / "replica"))
    write_segments(store, "t", 0, minute_batches(0, 1), roll_rows=100)
    Replicator(store, target, consumed=lambda _topic: True).run_once()
    marker = tmp_path / "replica" / "t" / MARKER_FILE
    assert not marker.exists()
    write_segments(store, "t", 0, [batch(range(100, 200))], roll_rows=100)
    assert Replicator(store, target).run_once().segments == 1
    assert marker.read_text() == f"{store.manifest.store_id()}\n"
    assert s3_keys(target) == stored_keys(store)
    store.close()


def test_a_topic_is_produced_unless_the_store_or_the_config_says_it_is_consumed(
    tmp_path: Path,
) -> None:
    """Kafka's offsets: a Kafka source recorded for a partition, or a mapping consuming
    into the topic; a roll-up topic follows its topic. Everything else the store numbers."""
    store = Store.open(tmp_path / "data")
    topics = ("direct", "api", "sourced", "configured", "sourced.rollup.1m", "direct.rollup.1m")
    for topic in topics:
        write_segments(store, topic, 0, minute_batches(0, 1), roll_rows=100)
    store.manifest.ensure_produced_topic("api", 1, "auto_create")
    store.manifest.record_source_topic("sourced", 0, "clicks", "id-1")
    origins = OffsetOrigins(store, consumed=lambda topic: topic == "configured")
    assert {t for t in topics if origins.store_numbered(t)} == {"direct", "api", "direct.rollup.1m"}
    store.close()


def test_topics_replicate_into_their_own_folders_whatever_their_columns(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two topics sharing partition 0 and offsets, one with a column of its own: each
    topic's rows land in its folder once (one Spark write per topic)."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "alpha", 0, minute_batches(0, 1), roll_rows=100)
    levels = pa.array(["info"] * 40)
    write_segments(store, "beta", 0, [batch(range(40), extra={"level": levels})], roll_rows=40)
    target_dir = tmp_path / "replica"
    report = Replicator(store, Target.parse(str(target_dir))).run_once(spark)
    assert report.rows == 140
    for topic in ("alpha", "beta"):
        assert spark_keys(spark, str(target_dir / topic)) == stored_keys(store, topic)
    assert "level" in spark.read.parquet(str(target_dir / "beta")).columns
    assert "level" not in spark.read.parquet(str(target_dir / "alpha")).columns
    store.close()


def test_a_task_whose_segment_changed_during_the_run_is_copied_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment quarantined (or consolidated) between the copy and its record: the task's
    files go and none of its segments counts as replicated, so the replica never holds
    rows the manifest does not say it holds."""
    import plateau_spark.replication.job as job  # noqa: PLC0415

    store = Store.open(tmp_path / "data")
    write_segments(store, "t", 0, minute_batches(0, 3), roll_rows=100)
    first, second, third = store.manifest.segments("t")
    target = Target.parse(str(tmp_path / "replica"))
    copy = job._run_here

    def copy_then_quarantine(tasks: list[Any]) -> Any:
        files = copy(tasks)
        store.manifest.quarantine(third.id, "damaged")
        return files

    monkeypatch.setattr(job, "_run_here", copy_then_quarantine)
    report = Replicator(store, target).run_once()
    assert report.segments == 0 and report.files == 0
    assert list((tmp_path / "replica").rglob("*.parquet")) == []
    states = {s.id: s.state for s in store.manifest.segments("t", states=tuple(SegmentState))}
    assert states == {
        first.id: SegmentState.SEALED,
        second.id: SegmentState.SEALED,
        third.id: SegmentState.QUARANTINED,
    }
    monkeypatch.setattr(job, "_run_here", copy)
    assert Replicator(store, target).run_once().segments == 2
    replica = ds.dataset(str(tmp_path / "replica" / "t"), format="parquet", partitioning="hive")
    assert sorted(replica.to_table().column("offset").to_pylist()) == list(range(200))
    store.close()


def test_a_segment_sealed_after_a_planned_one_was_removed_is_not_counted_as_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """During the copy, retention removes the task's newest segment (unreplicated, its grace
    over) and a new segment is sealed: it was not copied, so it must stay sealed and reach
    the replica with the next run."""
    import plateau_spark.replication.job as job  # noqa: PLC0415

    store = Store.open(tmp_path / "data")
    write_segments(store, "t", 0, minute_batches(0, 3), roll_rows=100)
    newest = store.manifest.segments("t")[-1]
    target = Target.parse(str(tmp_path / "replica"))
    copy = job._run_here

    def copy_then_retention_and_a_seal(tasks: list[Any]) -> Any:
        files = copy(tasks)
        store.manifest.mark_deleting([newest.id], at=0)
        Retention(store, limits=StoreLimits(deletion_grace_s=0)).run()
        write_segments(store, "t", 1, minute_batches(1, 1), roll_rows=100)
        return files

    monkeypatch.setattr(job, "_run_here", copy_then_retention_and_a_seal)
    Replicator(store, target).run_once()
    [sealed] = store.manifest.segments("t", partitions=[1])
    assert sealed.state == SegmentState.SEALED
    monkeypatch.setattr(job, "_run_here", copy)
    Replicator(store, target).run_once()
    replica = ds.dataset(str(tmp_path / "replica" / "t"), format="parquet", partitioning="hive")
    copied = replica.to_table().to_pydict()
    pairs = zip(copied["partition"], copied["offset"], strict=True)
    assert keys_of([(int(p), o) for p, o in pairs]) == stored_keys(store)
    store.close()


def test_after_rebuild_manifest_files_of_removed_segments_stay(tmp_path: Path) -> None:
    """Replicated, then retention removed the older segment, then a rebuild-manifest
    (replicated_offset back to 0): the rows of the removed segment stay in the replica (it
    is their only copy), the remaining segment's rows are there once, whichever day's
    folder they are in (part of it is stamped a day later)."""
    day = 86_400_000
    store = Store.open(tmp_path / "data")
    older = batch(range(100), times=[BASE_MS + i for i in range(100)])
    late = [BASE_MS + i + (day if i < 150 else 0) for i in range(100, 200)]
    write_segments(store, "t", 0, [older, batch(range(100, 200), times=late)], roll_rows=100)
    target = Target.parse(str(tmp_path / "replica"))
    assert Replicator(store, target).run_once().files == 2  # 0-199 on day D, 100-149 on D+1
    keep_one_replicated(store)
    assert [s.start_offset for s in store.manifest.segments("t")] == [100]
    store.close()
    rebuild_manifest(tmp_path / "data")
    store = Store.open(tmp_path / "data")
    Replicator(store, target).run_once()
    replica = ds.dataset(str(tmp_path / "replica" / "t"), format="parquet", partitioning="hive")
    assert Counter(replica.to_table().column("offset").to_pylist()) == Counter(range(200))
    assert [s.state for s in store.manifest.segments("t")] == [SegmentState.REPLICATED]
    store.close()


def test_an_s3_write_that_fails_half_way_leaves_no_object(
    tmp_path: Path, s3_target: Target
) -> None:
    """Closing an S3 upload completes it whatever was written: a failed write is staged
    under a prefix readers skip and never reaches its name."""
    filesystem = s3_target.filesystem()

    def fails(out: Any) -> None:
        out.write(b"PAR1" + bytes(1000))
        raise OSError("the segment went away")

    with pytest.raises(OSError, match="went away"):
        s3_target.write(filesystem, "t/date=2023-11-14/partition=0/x.parquet", fails)
    listed = filesystem.get_file_info(fs.FileSelector(s3_target.path(""), recursive=True))
    assert [i.path for i in listed if i.type == fs.FileType.File] == []
    assert s3_target.write(filesystem, "t/ok.bin", lambda out: out.write(b"ok")) == 2
    listed = filesystem.get_file_info(fs.FileSelector(s3_target.path(""), recursive=True))
    assert [i.path for i in listed if i.type == fs.FileType.File] == [s3_target.path("t/ok.bin")]


def test_on_an_interval_a_failed_run_is_logged_and_the_next_one_tries_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path / "data")
    write_segments(store, "t", 0, minute_batches(0, 1), roll_rows=100)
    replicator = Replicator(store, Target.parse(str(tmp_path / "replica")))
    real = replicator.run_once
    calls = []
    stop = threading.Event()

    def flaky(spark: Any = None) -> ReplicationReport:
        calls.append(1)
        if len(calls) == 1:
            raise TargetError("object storage is away")
        stop.set()
        return real(spark)

    monkeypatch.setattr(replicator, "run_once", flaky)
    with capture_logs() as logs:
        reports = replicate(replicator, None, interval_s=0.01, stop=stop)
    assert [r.segments for r in reports] == [1]
    assert [e["event"] for e in logs if e["event"].startswith("replication_")] == [
        "replication_failed",
        "replication_run",
    ]

    def away(spark: Any = None) -> ReplicationReport:
        raise TargetError("object storage is away")

    monkeypatch.setattr(replicator, "run_once", away)
    with pytest.raises(ReplicationFailedError):  # once: the failure is the answer
        replicate(replicator, None, interval_s=0.01, once=True)
    store.close()


@pytest.mark.parametrize(
    ("writer", "field"),
    [
        *(("spark", f) for f in ("date", "Date")),
        # A column named partition in any case reads as partition_ (ingest stores such
        # fields so, segments from before it hold them unsuffixed), and one beside a
        # partition_ is refused: tests/spark/test_old_names.py.
        *(("in-process", f) for f in ("date", "Date")),
    ],
)
def test_a_field_named_like_a_folder_column_keeps_its_values_under_a_suffixed_name(
    spark: SparkSession, tmp_path: Path, field: str, writer: str
) -> None:
    """A data column named `date` in any case is written as `date_`, or as `date__` when a
    column `date_` exists: the `date` column Spark's writer adds, or the folder values
    partition discovery reads, would otherwise replace its values or fail the run."""
    store = Store.open(tmp_path / "data")
    offsets = range(40)
    extra = {
        field: pa.array([f"order-{o}" for o in offsets]),
        f"{field}_": pa.array(list(offsets), pa.int64()),
    }
    write_segments(store, "t", 0, [batch(offsets, extra=extra)], roll_rows=40)
    target_dir = tmp_path / "replica"
    Replicator(store, Target.parse(str(target_dir))).run_once(spark if writer == "spark" else None)

    df = spark.read.parquet(str(target_dir / "t"))
    assert {"date", "partition", f"{field}_", f"{field}__"} <= set(df.columns)
    rows = df.select("date", "partition", "offset", f"{field}_", f"{field}__").collect()
    assert sorted((r.offset, r[3], r[4]) for r in rows) == [(o, o, f"order-{o}") for o in offsets]
    assert {(str(r.date), r.partition) for r in rows} == {("2023-11-14", 0)}
    store.close()
