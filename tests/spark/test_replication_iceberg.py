"""Replication into Iceberg tables: layout, offsets in snapshots, read back with pyiceberg
and with Spark, schema evolution across runs, compaction, and a real S3-compatible server."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import fs
from pyiceberg.expressions import EqualTo
from pyspark.sql import SparkSession
from structlog.testing import capture_logs

from plateau_core import Retention, SegmentState, Store, StoreLimits
from plateau_spark.errors import ReplicaOwnerError, TopicReplicationError
from plateau_spark.iceberg_read import iceberg_frame
from plateau_spark.replication import (
    IcebergReplicator,
    IcebergSettings,
    SchemaConflictError,
    Target,
)
from plateau_spark.replication.iceberg_commit import (
    OFFSETS,
    RANGES,
    STORE_ID,
    Committed,
    committed_offsets,
    committed_state,
)
from tests.spark.conftest import minute_batches, s3_bucket_target, write_segments
from tests.spark.iceberg_support import data_files, replicator, table_keys
from tests.spark.test_replication import across_midnight, stored_keys
from tests.support import batch


def test_table_layout_offsets_and_reads_from_pyiceberg_and_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "data")
    across_midnight(store)
    job = replicator(store, tmp_path / "warehouse")

    report = job.run_once()
    assert (report.segments, report.files, report.rows) == (8, 3, 500)
    table = job.table("t")
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("timestamp_day", "day"),
        ("partition", "identity"),
    ]
    assert table.schema().column_names[:3] == ["partition", "offset", "timestamp"]
    assert data_files(table) == [
        "day=2023-11-14/partition=0/00000000000000000000-00000000000000000149.parquet",
        "day=2023-11-14/partition=1/00000000000000000000-00000000000000000199.parquet",
        "day=2023-11-15/partition=0/00000000000000000150-00000000000000000299.parquet",
    ]
    summary = table.current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    assert json.loads(summary[OFFSETS]) == {"0": 300, "1": 200}
    assert json.loads(summary[RANGES]) == {"0": [0, 300], "1": [0, 200]}
    assert table_keys(table) == stored_keys(store)
    # Hidden partitioning: a filter on the Kafka partition reads that partition's file only.
    scan = table.scan(row_filter=EqualTo("partition", 1))
    assert len(list(scan.plan_files())) == 1 and scan.to_arrow().num_rows == 200

    frame = iceberg_frame(spark, table)
    rows = frame.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(stored_keys(store).elements())
    on_15th = frame.filter("timestamp >= TIMESTAMP'2023-11-15 00:00:00 UTC'").count()
    assert on_15th == 150
    stored = store.read("t", partitions=[0]).to_table().sort_by("offset")
    copied = table.scan(row_filter=EqualTo("partition", 0)).to_arrow().sort_by("offset")
    assert copied.column("value").equals(stored.column("value"))
    assert copied.column("timestamp").cast(pa.int64()).to_pylist() == [
        t * 1000 for t in stored.column("timestamp").cast(pa.int64()).to_pylist()
    ]

    states = {s.state for s in store.manifest.segments("t", states=tuple(SegmentState))}
    assert states == {SegmentState.REPLICATED}
    # Nothing new: no run, no snapshot.
    snapshots = len(table.snapshots())
    assert job.run_once().segments == 0
    table.refresh()
    assert len(table.snapshots()) == snapshots
    store.close()


def test_runs_append_one_snapshot_each_with_their_ranges(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    write_segments(store, "t", 0, minute_batches(0, 3), roll_rows=100)
    job.run_once()
    write_segments(store, "t", 0, [batch(range(300, 400))], roll_rows=100)
    write_segments(store, "t", 1, minute_batches(1, 1), roll_rows=100)
    job.run_once()
    table = job.table("t")
    assert committed_offsets(table) == {0: 400, 1: 100}
    summary = table.current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    assert json.loads(summary[RANGES]) == {"0": [300, 400], "1": [0, 100]}
    assert len(table.snapshots()) == 2
    assert table_keys(table) == stored_keys(store)
    store.close()


def test_a_segment_sealed_after_a_planned_one_was_removed_is_not_counted_as_committed(
    tmp_path: Path,
) -> None:
    """Between the table commit and the manifest's record, retention removes the newest
    segment of the run (its grace over) and a new one is sealed: that one is in no snapshot,
    so it must stay sealed and be committed by the next run."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "t", 0, minute_batches(0, 3), roll_rows=100)
    newest = store.manifest.segments("t")[-1]

    def retention_and_a_seal(name: str) -> None:
        if name == "committed":
            store.manifest.mark_deleting([newest.id], at=0)
            Retention(store, limits=StoreLimits(deletion_grace_s=0)).run()
            write_segments(store, "t", 1, minute_batches(1, 1), roll_rows=100)

    replicator(store, tmp_path / "warehouse", step=retention_and_a_seal).run_once()
    [sealed] = store.manifest.segments("t", partitions=[1])
    assert sealed.state == SegmentState.SEALED
    job = replicator(store, tmp_path / "warehouse")
    job.run_once()
    assert committed_offsets(job.table("t")) == {0: 300, 1: 100}
    in_table = table_keys(job.table("t"))
    assert all(in_table[key] == 1 for key in stored_keys(store))
    store.close()


def test_new_fields_become_columns_and_a_changed_type_is_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    write_segments(store, "t", 0, [batch(range(100))], roll_rows=100)
    job.run_once()

    users = pa.array([f"u{i}" for i in range(100, 200)])
    counts = pa.array(list(range(100)), pa.int32())
    extra = {"user": users, "count": counts}
    write_segments(store, "t", 0, [batch(range(100, 200), extra=extra)], roll_rows=100)
    job.run_once()
    table = job.table("t")
    assert {"user", "count"} <= set(table.schema().column_names)
    rows = table.scan().to_arrow().sort_by("offset")
    assert rows.column("user").to_pylist() == [None] * 100 + users.to_pylist()
    assert table_keys(table) == stored_keys(store)

    # int to long is a promotion Iceberg allows.
    wider = {"count": pa.array(list(range(100)), pa.int64())}
    write_segments(store, "t", 0, [batch(range(200, 300), extra=wider)], roll_rows=100)
    job.run_once()
    table.refresh()
    assert str(table.schema().find_field("count").field_type) == "long"

    # Text where the table has a long is no widening (the store reads the clash as JSON
    # text): refused, naming the field; nothing of it recorded. (long to double is a
    # widening, which replaces the column: test_json_numbers.py.)
    texts = {"count": pa.array(["many"] * 100)}
    write_segments(store, "t", 0, [batch(range(300, 400), extra=texts)], roll_rows=100)
    with pytest.raises(SchemaConflictError, match=r"field 'count' is string .* int64"):
        job.run_once()
    assert committed_offsets(job.table("t")) == {0: 300}
    assert len(store.manifest.segments("t", states=(SegmentState.SEALED,))) == 1
    store.close()


def test_a_field_named_like_the_day_partition_field_lands_under_a_suffixed_column(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A data field `timestamp_day` (any case) failed every run: Iceberg refuses a partition
    field named like a column, and the day partition field is named so. It is held with a `_`
    suffix; a field already named so gets one more, in every run, so a column keeps the
    field it was created for whatever fields come later."""
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    days = pa.array([f"d{i}" for i in range(100)])
    write_segments(store, "t", 0, [batch(range(100), extra={"timestamp_day": days})], 100)
    job.run_once()
    table = job.table("t")
    assert [f.name for f in table.spec().fields] == ["timestamp_day", "partition"]
    assert "timestamp_day" not in table.schema().column_names
    rows = table.scan().to_arrow().sort_by("offset")
    assert rows.column("timestamp_day_").to_pylist() == days.to_pylist()

    later = {"Timestamp_Day_": pa.array(range(100), pa.int64())}
    write_segments(store, "t", 1, [batch(range(100), extra=later)], 100)
    job.run_once()
    table.refresh()
    assert {"timestamp_day_", "Timestamp_Day__"} <= set(table.schema().column_names)
    rows = table.scan().to_arrow().sort_by([("partition", "ascending"), ("offset", "ascending")])
    assert rows.column("timestamp_day_").to_pylist() == days.to_pylist() + [None] * 100
    assert rows.column("Timestamp_Day__").to_pylist() == [None] * 100 + list(range(100))
    assert table_keys(table) == stored_keys(store)
    frame = iceberg_frame(spark, table).filter("partition = 0 AND offset = 7")
    assert frame.select("timestamp_day_").collect()[0][0] == "d7"
    store.close()


def test_widened_and_clashed_columns_hold_what_the_store_reads(tmp_path: Path) -> None:
    """An integer beyond 2**53 in a column widened to a double, and a clashed column holding
    a struct or bytes, failed every run (the topic never replicated); a clashed column's
    other values were Arrow's casts (`1` for 1.0, bytes as themselves), not the JSON text
    the store reads them as."""
    store = Store.open(tmp_path / "data")
    segments = [
        {"x": pa.array([2**53 + 1, 1]), "u": pa.array([1.0, 2.5e-7])},
        {"x": pa.array([0.5, 1.5]), "u": pa.array([{"id": 7}, None])},
        {"u": pa.array([b"\x00\xff", b"a"])},
        {"u": pa.array(["ann", "42"])},
    ]
    for partition, extra in enumerate(segments):
        write_segments(store, "t", partition, [batch(range(2), extra=extra)], roll_rows=2)
    job = replicator(store, tmp_path / "warehouse")
    job.run_once()

    def rows(table: pa.Table) -> list[tuple[object, ...]]:
        picked = table.select(["partition", "offset", "x", "u"]).to_pylist()
        return sorted(tuple(r.values()) for r in picked)

    stored = store.read("t").to_table()
    partitions = pa.array([p for p in range(4) for _ in range(2)], pa.int32())
    want = rows(stored.append_column("partition", partitions))
    assert want[1:4] == [(0, 1, 1.0, "2.5e-07"), (1, 0, 0.5, '{"id":7}'), (1, 1, 1.5, None)]
    assert rows(job.table("t").scan().to_arrow()) == want
    store.close()


def test_compaction_rewrites_small_files_and_expiry_deletes_what_only_old_snapshots_read(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    for run in range(4):
        for partition in (0, 1):
            rows = [batch(range(run * 100, (run + 1) * 100))]
            write_segments(store, "t", partition, rows, roll_rows=100)
        job.run_once()
    table = job.table("t")
    before = data_files(table)
    assert len(before) == 8
    keys = stored_keys(store)

    done = job.maintain()["t"]
    assert (done.files_rewritten, done.files_written) == (8, 2)
    table.refresh()
    after = data_files(table)
    assert len(after) == 2 and all(".c" in name for name in after)
    assert table_keys(table) == keys
    # Offsets are carried forward by the compaction's snapshot, so replication goes on,
    # and the store feeding the table with them.
    assert committed_offsets(table) == {0: 400, 1: 400}
    assert committed_state(table).store_id == store.manifest.store_id()
    # Expiry kept the newest min_snapshots (10 by default): all five here.
    assert done.snapshots_expired == 0 and len(table.snapshots()) == 5

    write_segments(store, "t", 0, [batch(range(400, 500))], roll_rows=100)
    assert job.run_once().rows == 100
    keep_one = IcebergSettings(min_snapshots=1, snapshot_retention_s=0)
    short = replicator(store, tmp_path / "warehouse", settings=keep_one)
    again = short.maintain()["t"]
    # Partition 0's compacted file and the new small one become one file; then every
    # snapshot but that compaction's goes, and with them the ten files only they read.
    assert (again.files_rewritten, again.files_written) == (2, 1)
    assert again.snapshots_expired == 6 and again.files_deleted == 10
    on_disk = sorted(
        str(p.relative_to(tmp_path / "warehouse" / "plateau" / "t" / "data"))
        for p in (tmp_path / "warehouse").rglob("*.parquet")
    )
    table.refresh()
    assert on_disk == data_files(table)
    assert table_keys(table) == stored_keys(store)
    store.close()


def test_offsets_survive_another_engines_snapshots_once_plateaus_are_expired(
    tmp_path: Path,
) -> None:
    """Another writer's commits (a backfill, a manifest rewrite) carry no plateau offsets;
    once expiry dropped every snapshot that did, the table's own files still say which
    offsets it holds: none of them is taken for an uncommitted run's file and deleted."""
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    write_segments(store, "t", 0, [batch(range(100))], roll_rows=100)
    job.run_once()
    table = job.table("t")
    # A row another writer adds, in a file of its own naming.
    foreign = pa.Table.from_pylist(
        [{"partition": 7, "offset": 10_000, "timestamp": datetime(2023, 11, 14, tzinfo=UTC)}],
        schema=table.schema().as_arrow(),
    )
    path = tmp_path / "warehouse" / "plateau" / "t" / "data" / "backfill.parquet"
    pq.write_table(foreign, path)
    table.add_files([str(path)])
    keep_one = IcebergSettings(min_snapshots=1, snapshot_retention_s=0)
    expiry = replicator(store, tmp_path / "warehouse", settings=keep_one)
    assert expiry.maintain()["t"].snapshots_expired == 1
    table.refresh()
    assert committed_offsets(table) == {0: 100}

    write_segments(store, "t", 0, [batch(range(100, 200))], roll_rows=100)
    report = job.run_once()
    assert report.orphans_removed == 0
    table.refresh()
    rows = table_keys(table)
    assert rows[(0, 0)] == 1 and rows[(0, 199)] == 1
    assert sum(rows.values()) == 201
    assert committed_offsets(table) == {0: 200}
    store.close()


def test_expiry_keeps_a_tagged_snapshot_and_the_files_it_reads(tmp_path: Path) -> None:
    """A tag (an audit's, a reproducible read's) protects its snapshot: expiry passes over it
    instead of failing every maintenance run from then on."""
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    for run in range(3):
        write_segments(store, "t", 0, [batch(range(run * 100, (run + 1) * 100))], roll_rows=100)
        job.run_once()
    table = job.table("t")
    first = min(table.snapshots(), key=lambda s: s.timestamp_ms).snapshot_id
    table.manage_snapshots().create_tag(first, "audit").commit()
    keep_one = IcebergSettings(min_snapshots=1, snapshot_retention_s=0)
    done = replicator(store, tmp_path / "warehouse", settings=keep_one).maintain()["t"]
    table.refresh()
    current = table.current_snapshot()
    assert current is not None
    assert {s.snapshot_id for s in table.snapshots()} == {first, current.snapshot_id}
    assert done.snapshots_expired == 2
    audit = table.scan(snapshot_id=first).to_arrow()
    assert sorted(audit.column("offset").to_pylist()) == list(range(100))
    assert table_keys(table) == stored_keys(store)
    store.close()


def test_expiry_removes_metadata_files_nothing_names_once_an_hour_old(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    for run in range(3):
        write_segments(store, "t", 0, [batch(range(run * 100, (run + 1) * 100))], roll_rows=100)
        job.run_once()
    metadata = tmp_path / "warehouse" / "plateau" / "t" / "metadata"
    # What a commit killed half-way leaves: a metadata file and a manifest nothing names.
    (metadata / "00099-0badc0de.metadata.json").write_text("{}")
    (metadata / "0badc0de-m0.avro").write_bytes(b"x")
    fresh = metadata / "00100-5ca1ab1e.metadata.json"  # a commit running elsewhere, maybe
    hour_ago = time.time() - 2 * 3600
    for path in metadata.iterdir():
        os.utime(path, (hour_ago, hour_ago))
    fresh.write_text("{}")

    keep_one = IcebergSettings(min_snapshots=1, snapshot_retention_s=0)
    done = replicator(store, tmp_path / "warehouse", settings=keep_one).maintain()["t"]
    table = job.table("t")
    assert done.snapshots_expired >= 2
    left = {p.name for p in metadata.iterdir()}
    named = {table.metadata_location.rsplit("/", 1)[-1]}
    named |= {e.metadata_file.rsplit("/", 1)[-1] for e in table.metadata.metadata_log}
    for snapshot in table.snapshots():
        named.add(snapshot.manifest_list.rsplit("/", 1)[-1])
        named |= {m.manifest_path.rsplit("/", 1)[-1] for m in snapshot.manifests(table.io)}
    # Old files nothing names are gone (the planted ones and the expired snapshots' manifest
    # lists); what the table names stays, and so does the file younger than an hour.
    assert left == named | {fresh.name}
    assert "00099-0badc0de.metadata.json" not in left and "0badc0de-m0.avro" not in left
    assert done.metadata_files_deleted >= 4
    assert table_keys(table) == stored_keys(store)
    store.close()


@pytest.fixture
def s3_warehouse(s3_endpoint: str) -> Target:
    return s3_bucket_target(s3_endpoint)


def test_s3_warehouse_with_an_unfinished_run_first(tmp_path: Path, s3_warehouse: Target) -> None:
    store = Store.open(tmp_path / "data")
    across_midnight(store)

    def die_after_files(step: str) -> None:
        if step == "files_written":
            raise RuntimeError("killed")

    with pytest.raises(TopicReplicationError, match="killed"):
        replicator(store, s3_warehouse, step=die_after_files).run_once()
    job = replicator(store, s3_warehouse)
    assert job.table("t").current_snapshot() is None
    report = job.run_once()
    assert report.orphans_removed == 3 and report.rows == 500
    table = job.table("t")
    assert table.location().startswith(f"s3://{s3_warehouse.root}/")
    assert table_keys(table) == stored_keys(store)
    selector = fs.FileSelector(s3_warehouse.path("plateau/t/data"), recursive=True)
    listing = s3_warehouse.filesystem().get_file_info(selector)
    parquet = [i.path for i in listing if i.path.endswith(".parquet")]
    assert len(parquet) == 3
    store.close()


def test_a_produced_topic_of_a_store_created_again_is_refused_not_taken_as_committed(
    tmp_path: Path,
) -> None:
    """A store created again at its data folder numbers a produced topic's offsets from 0
    again: below the table's committed offsets, yet other records. The topic is refused,
    naming both stores: nothing is committed, its segments stay unreplicated (retention that
    requires replication keeps them), and the store's other topics are replicated."""
    shared = IcebergSettings(catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    warehouse = tmp_path / "warehouse"
    old = Store.open(tmp_path / "data")
    write_segments(old, "t", 0, minute_batches(0, 3), roll_rows=100)
    replicator(old, warehouse, settings=shared).run_once()
    old_id = old.manifest.store_id()
    summary = replicator(old, warehouse, settings=shared).table("t").current_snapshot()
    assert summary is not None and summary.summary is not None
    assert summary.summary.additional_properties[STORE_ID] == old_id
    old.close()
    shutil.rmtree(tmp_path / "data")
    store = Store.open(tmp_path / "data")
    write_segments(store, "t", 0, [batch(range(200), value_size=9)], roll_rows=100)
    write_segments(store, "u", 0, minute_batches(0, 1), roll_rows=100)
    job = replicator(store, warehouse, settings=shared)

    with capture_logs() as logs, pytest.raises(ReplicaOwnerError) as refused:
        job.run_once()
    assert set(refused.value.refused) == {"t"}
    message = str(refused.value)
    assert old_id in message and store.manifest.store_id() in message
    assert "another target or table" in message and "remove its replica" in message
    [event] = [e for e in logs if e["event"] == "replica_of_another_store"]
    assert (event["topic"], event["replica_store_id"]) == ("t", old_id)
    assert event["store_id"] == store.manifest.store_id() and "plateau.t" in event["target"]
    table = job.table("t")
    assert len(table.snapshots()) == 1 and committed_offsets(table) == {0: 300}
    assert {s.state for s in store.manifest.segments("t")} == {SegmentState.SEALED}
    assert table_keys(job.table("u")) == stored_keys(store, "u")
    with pytest.raises(ReplicaOwnerError):  # every run, until someone decides
        job.run_once()
    store.close()


def test_a_consumed_topic_of_a_store_created_again_skips_what_the_table_holds(
    tmp_path: Path,
) -> None:
    """A consumed topic's offsets are Kafka's: below the committed offsets are the same
    records, already in the table, as several nodes feeding one table rely on."""
    shared = IcebergSettings(catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    warehouse = tmp_path / "warehouse"
    old = Store.open(tmp_path / "data")
    old.manifest.record_source_topic("t", 0, "clicks", "id-1")
    write_segments(old, "t", 0, minute_batches(0, 3), roll_rows=100)
    replicator(old, warehouse, settings=shared).run_once()
    old.close()
    shutil.rmtree(tmp_path / "data")
    store = Store.open(tmp_path / "data")
    store.manifest.record_source_topic("t", 0, "clicks", "id-1")
    write_segments(store, "t", 0, minute_batches(0, 4)[2:], roll_rows=100)
    job = replicator(store, warehouse, settings=shared)
    assert job.run_once().segments == 2
    table = job.table("t")
    assert committed_offsets(table) == {0: 400}
    assert table_keys(table) == Counter({(0, o): 1 for o in range(400)})
    summary = table.current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    assert STORE_ID not in summary
    store.close()


def test_a_table_recording_no_store_is_adopted_by_the_first_store_replicating_into_it(
    tmp_path: Path,
) -> None:
    """A table written before store ids were recorded (its snapshots carry offsets only):
    the store replicating into it next records its id, and from then on the table is
    that store's."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "t", 0, minute_batches(0, 2), roll_rows=100)
    warehouse = Target.parse(str(tmp_path / "warehouse"))
    # Commits as a plateau of before made them: offsets, no store id.
    IcebergReplicator(store, warehouse, consumed=lambda _topic: True).run_once()
    table = replicator(store, warehouse).table("t")
    assert committed_state(table) == Committed({0: 200}, None)

    write_segments(store, "t", 0, [batch(range(200, 300))], roll_rows=100)
    with capture_logs() as logs:
        replicator(store, tmp_path / "warehouse").run_once()
    assert [e["store_id"] for e in logs if e["event"] == "replica_store_adopted"] == [
        store.manifest.store_id()
    ]
    table.refresh()
    assert committed_state(table) == Committed({0: 300}, store.manifest.store_id())
    store.close()


def test_a_table_folder_the_catalog_does_not_list_is_left_whole(tmp_path: Path) -> None:
    """The default catalog lives in the data folder: a data folder wiped takes it along, and
    the store created there finds no table, though the warehouse still holds the old one's
    files at the new table's location. Creating a table there would delete them as an
    uncommitted run's; the topic is refused instead, saying how to get the table back."""
    warehouse = tmp_path / "warehouse"
    old = Store.open(tmp_path / "data")
    old.manifest.record_source_topic("t", 0, "clicks", "id-1")
    write_segments(old, "t", 0, minute_batches(0, 3), roll_rows=100)
    replicator(old, warehouse).run_once()
    old.close()
    files = sorted(p for p in warehouse.rglob("*") if p.is_file())
    shutil.rmtree(tmp_path / "data")
    store = Store.open(tmp_path / "data")
    store.manifest.record_source_topic("t", 0, "clicks", "id-1")
    write_segments(store, "t", 0, minute_batches(0, 4)[3:], roll_rows=100)
    write_segments(store, "u", 0, minute_batches(0, 1), roll_rows=100)
    job = replicator(store, warehouse)

    with pytest.raises(ReplicaOwnerError, match="register") as refused:
        job.run_once()
    assert set(refused.value.refused) == {"t"}
    assert str(warehouse / "plateau" / "t") in str(refused.value)
    assert all(p.exists() for p in files)
    assert {s.state for s in store.manifest.segments("t")} == {SegmentState.SEALED}
    assert table_keys(job.table("u")) == stored_keys(store, "u")

    # What the message says to do: the table registered again, replication goes on in it.
    newest = sorted((warehouse / "plateau" / "t" / "metadata").glob("*.metadata.json"))[-1]
    job.catalog().register_table(("plateau", "t"), f"file://{newest}")
    assert job.run_once().segments == 1
    assert table_keys(job.table("t")) == Counter({(0, o): 1 for o in range(400)})
    store.close()
