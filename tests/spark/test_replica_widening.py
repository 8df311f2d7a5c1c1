"""Replicas of a topic whose column widened (int64, then double) migrated to the new type: a
failure or a SIGKILL in the middle of the migration, then the next run; two stores feeding
one replica, one of them widened; and a type change that is no widening."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyarrow import fs
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType
from structlog.testing import capture_logs

from plateau_core import SegmentState, Store
from plateau_spark.errors import TopicReplicationError
from plateau_spark.replication import IcebergSettings, Replicator, Target, TargetError
from plateau_spark.replication.iceberg_commit import committed_offsets
from plateau_spark.replication.parquet_migration import read_record
from tests.bridge_support import REPO
from tests.spark.conftest import s3_bucket_target, write_segments
from tests.spark.iceberg_support import data_files, replicator, table_keys
from tests.spark.test_json_numbers import FRACTIONS, WHOLE, land, rows_of
from tests.support import batch

# A run in a process of its own that kills itself with SIGKILL once the migration has
# rewritten `after` files.
_CHILD = """
import os, signal, sys
from pathlib import Path
from plateau_core import Store
from plateau_spark.replication import IcebergReplicator, Replicator, Target

data, target, kind, after = sys.argv[1:5]
rewritten = 0

def step(name: str) -> None:
    global rewritten
    if name == "migration_file_rewritten":
        rewritten += 1
        if rewritten == int(after):
            os.kill(os.getpid(), signal.SIGKILL)

job_class = IcebergReplicator if kind == "iceberg" else Replicator
job_class(Store.open(Path(data)), Target.parse(target), step=step, file_bytes=1).run_once()
"""


class InjectedError(Exception):
    pass


def fail_after(files: int, error: type[Exception] = InjectedError) -> Callable[[str], None]:
    """A step hook failing once the migration has rewritten `files` files."""
    seen = Counter[str]()

    def step(name: str) -> None:
        seen[name] += 1
        if name == "migration_file_rewritten" and seen[name] == files:
            raise error(f"injected failure after {files} rewritten files")

    return step


def three_files_then_fractions(store: Store, replicate: Callable[[], object]) -> None:
    """Three segments of integers replicated (a file each), then fractions sealed."""
    for offset in (0, 2, 4):
        land(store, "j", WHOLE, offset)
    replicate()
    land(store, "j", FRACTIONS, 6)


def latency_types(target: Target, topic: str = "j") -> list[str]:
    """The latency column's type in each replica file of the topic, by name."""
    filesystem = target.filesystem()
    selector = fs.FileSelector(target.path(topic), recursive=True)
    files = sorted(
        i.path for i in filesystem.get_file_info(selector) if i.path.endswith(".parquet")
    )
    types = []
    for path in files:
        with filesystem.open_input_file(path) as handle:
            types.append(str(pq.ParquetFile(handle).schema_arrow.field("latency").type))
    return types


def replica_rows(target: Target, topic: str = "j") -> pa.Table:
    dataset = ds.dataset(
        target.path(topic), filesystem=target.filesystem(), format="parquet", partitioning="hive"
    )
    return dataset.to_table()


def parquet_target(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    if where == "local":
        return Target.parse(str(tmp_path / "replica"))
    return s3_bucket_target(request.getfixturevalue("s3_endpoint"))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_parquet_migration_that_fails_half_way_is_completed_by_the_next_run(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    store = Store.open(tmp_path / "data")
    target = parquet_target(where, tmp_path, request)
    three_files_then_fractions(store, Replicator(store, target, file_bytes=1).run_once)
    assert latency_types(target) == ["int64"] * 3

    failing = Replicator(store, target, file_bytes=1, step=fail_after(2))
    with pytest.raises(TopicReplicationError, match="injected failure"):
        failing.run_once()
    # Two files rewritten, whole, under their names; the third as it was; nothing of the
    # new segment written or recorded; the record says the migration is unfinished.
    assert sorted(latency_types(target)) == ["double", "double", "int64"]
    record = read_record(target, target.filesystem(), "j")
    assert record is not None and not record.complete
    assert record.schema.field("latency").type == pa.float64()
    sealed = store.manifest.segments("j", states=(SegmentState.SEALED,))
    assert [s.start_offset for s in sealed] == [6]

    with capture_logs() as logged:
        report = Replicator(store, target, file_bytes=1).run_once()
    assert report.files_migrated == 1 and report.files == 1 and report.segments == 1
    assert [e["first_offset"] for e in logged if e["event"] == "replica_file_migrated"] == [4]
    assert latency_types(target) == ["double"] * 4
    assert rows_of(replica_rows(target)) == rows_of(store.read("j").to_table())
    record = read_record(target, target.filesystem(), "j")
    assert record is not None and record.complete
    store.close()


def test_a_parquet_migration_killed_half_way_is_completed_by_the_next_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "data")
    target = Target.parse(str(tmp_path / "replica"))
    three_files_then_fractions(store, Replicator(store, target, file_bytes=1).run_once)
    store.close()
    child = _kill_after(tmp_path, target, "parquet", files=2)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert sorted(latency_types(target)) == ["double", "double", "int64"]
    store = Store.open(tmp_path / "data")
    assert Replicator(store, target, file_bytes=1).run_once().files_migrated == 1
    left = [p.name for p in (tmp_path / "replica").rglob("*") if p.is_file()]
    assert all(name.endswith(".parquet") or name.startswith("_plateau") for name in left)
    expected = rows_of(store.read("j").to_table())
    for merge in ("true", "false"):
        df = spark.read.option("mergeSchema", merge).parquet(str(tmp_path / "replica" / "j"))
        assert df.schema["latency"].dataType == DoubleType()
        got = df.orderBy("offset").select("offset", "latency", "o.ms", "l").collect()
        assert [tuple(r) for r in got] == expected
    store.close()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_an_iceberg_column_replacement_that_fails_half_way_leaves_the_table_as_it_was(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    store = Store.open(tmp_path / "data")
    warehouse = (
        Target.parse(str(tmp_path / "warehouse"))
        if where == "local"
        else s3_bucket_target(request.getfixturevalue("s3_endpoint"))
    )
    three_files_then_fractions(store, replicator(store, warehouse, file_bytes=1).run_once)
    table = replicator(store, warehouse).table("j")
    before = data_files(table)
    assert len(before) == 3

    failing = replicator(store, warehouse, file_bytes=1, step=fail_after(2, OSError))
    with pytest.raises(TargetError, match="injected failure after 2"):
        failing.run_once()
    table.refresh()
    assert str(table.schema().find_field("latency").field_type) == "long"
    assert data_files(table) == before and committed_offsets(table) == {0: 6}
    assert table_data_on_storage(table, warehouse) == before, "rewritten files were left"

    report = replicator(store, warehouse, file_bytes=1).run_once()
    assert report.files_migrated == 3 and report.segments == 1
    table.refresh()
    assert str(table.schema().find_field("latency").field_type) == "double"
    assert rows_of(table.scan().to_arrow()) == rows_of(store.read("j").to_table())
    assert table_keys(table) == {(0, o): 1 for o in range(8)}
    assert committed_offsets(table) == {0: 8}
    assert len(table_data_on_storage(table, warehouse)) == 3 + 3 + 1  # old, copies, new
    store.close()


def table_data_on_storage(table: Table, warehouse: Target) -> list[str]:
    """Every Parquet file under the table's data folder, named as data_files names them."""
    location = Target.parse(table.location(), warehouse.s3)
    selector = fs.FileSelector(location.path("data"), recursive=True)
    infos = location.filesystem().get_file_info(selector)
    return sorted(i.path.split("/data/", 1)[1] for i in infos if i.path.endswith(".parquet"))


def test_an_iceberg_column_replacement_killed_half_way_is_done_by_the_next_run(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "data")
    warehouse = tmp_path / "warehouse"
    three_files_then_fractions(store, replicator(store, warehouse, file_bytes=1).run_once)
    before = data_files(replicator(store, warehouse).table("j"))
    store.close()
    child = _kill_after(tmp_path, Target.parse(str(warehouse)), "iceberg", files=2)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    store = Store.open(tmp_path / "data")
    job = replicator(store, warehouse, file_bytes=1)
    table = job.table("j")
    assert data_files(table) == before
    assert str(table.schema().find_field("latency").field_type) == "long"

    assert job.run_once().files_migrated == 3
    table.refresh()
    assert rows_of(table.scan().to_arrow()) == rows_of(store.read("j").to_table())
    assert table_keys(table) == {(0, o): 1 for o in range(8)}
    # The killed run's two copies are read by no snapshot: compaction's sweep removes them.
    on_disk = {str(p).split("/data/", 1)[1] for p in (warehouse / "plateau").rglob("*.parquet")}
    stale = on_disk - set(data_files(table)) - set(before)
    assert len(stale) == 2 and all(".c" in name for name in stale)
    store.close()


def test_a_data_file_another_engine_wrote_with_field_ids_gets_the_new_column_id(
    tmp_path: Path,
) -> None:
    """A data file with field ids (as other engines write them, here under a name of their
    own) is read by id, not through the name mapping (by Iceberg's Java readers: pyiceberg
    falls back to names where a field has none): its copy carries the new column's id."""
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    land(store, "j", WHOLE, 0)
    job.run_once()
    table = job.table("j")
    with_ids = schema_to_pyarrow(table.schema(), include_field_ids=True)
    row = {"partition": 5, "offset": 0, "timestamp": 1_700_000_000_000_000, "latency": 42}
    folder = tmp_path / "warehouse" / "plateau" / "j" / "data" / "day=2023-11-14" / "partition=5"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row], schema=with_ids), folder / "other-engine.parquet")
    table.add_files([f"file://{folder / 'other-engine.parquet'}"])
    land(store, "j", FRACTIONS, 2)
    assert job.run_once().files_migrated == 2
    table.refresh()
    rows = table.scan().to_arrow().select(["partition", "offset", "latency"]).to_pylist()
    assert sorted(tuple(r.values()) for r in rows) == [
        (0, 0, 12.0),
        (0, 1, 7.0),
        (0, 2, 12.5),
        (0, 3, 1.0),
        (5, 0, 42.0),
    ]
    (copy,) = [f for f in data_files(table) if "/partition=5/" in f]
    footer = pq.read_schema(tmp_path / "warehouse" / "plateau" / "j" / "data" / copy)
    new_id = table.schema().find_field("latency").field_id
    assert footer.field("latency").metadata == {b"PARQUET:field_id": str(new_id).encode()}
    assert footer.field("offset").metadata == {b"PARQUET:field_id": b"2"}
    store.close()


def _kill_after(
    tmp_path: Path, target: Target, kind: str, files: int
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "data"), target.uri, kind, str(files)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_a_store_not_widened_writes_into_a_parquet_replica_another_store_widened(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two stores consuming one Kafka topic (a partition each) replicate into one target.
    Store A meets fractions and migrates every file of the replica, store B's included;
    store B, whose column is still int64, rewrites its new files in the recorded type."""
    target = Target.parse(str(tmp_path / "replica"))
    node_a, node_b = Store.open(tmp_path / "a"), Store.open(tmp_path / "b")
    for node, partition in ((node_a, 0), (node_b, 1)):
        node.manifest.record_source_topic("j", partition, "clicks", "id-1")
        land(node, "j", WHOLE, 0, partition)
        Replicator(node, target).run_once()
    land(node_a, "j", FRACTIONS, 2, 0)
    assert Replicator(node_a, target).run_once().files_migrated == 2
    land(node_b, "j", WHOLE, 2, 1)
    report = Replicator(node_b, target).run_once()
    assert report.files == 1 and report.files_migrated == 1
    assert latency_types(target) == ["double"] * 4

    for merge in ("true", "false"):
        df = spark.read.option("mergeSchema", merge).parquet(str(tmp_path / "replica" / "j"))
        assert df.schema["latency"].dataType == DoubleType()
        got = df.select("partition", "offset", "latency").collect()
        assert sorted(tuple(r) for r in got) == [
            (0, 0, 12.0),
            (0, 1, 7.0),
            (0, 2, 12.5),
            (0, 3, 1.0),
            (1, 0, 12.0),
            (1, 1, 7.0),
            (1, 2, 12.0),
            (1, 3, 7.0),
        ]
    node_a.close()
    node_b.close()


def test_a_store_not_widened_writes_into_an_iceberg_table_another_store_widened(
    tmp_path: Path,
) -> None:
    """Store B's column is still a long after store A replaced the table's by a double: B
    writes its rows as doubles instead of being refused."""
    shared = IcebergSettings(catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    warehouse = tmp_path / "warehouse"
    node_a, node_b = Store.open(tmp_path / "a"), Store.open(tmp_path / "b")
    for node, partition in ((node_a, 0), (node_b, 1)):
        node.manifest.record_source_topic("j", partition, "clicks", "id-1")
        land(node, "j", WHOLE, 0, partition)
        replicator(node, warehouse, settings=shared).run_once()
    land(node_a, "j", FRACTIONS, 2, 0)
    assert replicator(node_a, warehouse, settings=shared).run_once().files_migrated == 2
    land(node_b, "j", WHOLE, 2, 1)
    job = replicator(node_b, warehouse, settings=shared)
    assert job.run_once().segments == 1
    rows = job.table("j").scan().to_arrow()
    assert rows.schema.field("latency").type == pa.float64()
    got = [tuple(r.values()) for r in rows.select(["partition", "offset", "latency"]).to_pylist()]
    assert sorted(got) == [
        (0, 0, 12.0),
        (0, 1, 7.0),
        (0, 2, 12.5),
        (0, 3, 1.0),
        (1, 0, 12.0),
        (1, 1, 7.0),
        (1, 2, 12.0),
        (1, 3, 7.0),
    ]
    node_a.close()
    node_b.close()


def test_a_change_that_is_no_widening_leaves_the_parquet_files_as_they_are(
    tmp_path: Path,
) -> None:
    """A column stored as int64, then as text (the store reads the clash as JSON text): no
    file is rewritten, the run says so, and replicates as before."""
    store = Store.open(tmp_path / "data")
    target = Target.parse(str(tmp_path / "replica"))
    numbers = {"n": pa.array(range(10), pa.int64())}
    write_segments(store, "t", 0, [batch(range(10), extra=numbers)], roll_rows=10)
    Replicator(store, target).run_once()
    texts = {"n": pa.array(["x"] * 10)}
    write_segments(store, "t", 0, [batch(range(10, 20), extra=texts)], roll_rows=10)
    with capture_logs() as logged:
        report = Replicator(store, target).run_once()
    assert report.files_migrated == 0 and report.segments == 1
    (warning,) = [e for e in logged if e["event"] == "replica_type_not_migrated"]
    assert (warning["topic"], warning["column"]) == ("t", "n")
    assert (warning["replica_type"], warning["store_type"]) == ("int64", "string")
    files = sorted((tmp_path / "replica" / "t").rglob("*.parquet"))
    assert [str(pq.read_schema(f).field("n").type) for f in files] == ["int64", "string"]
    store.close()
