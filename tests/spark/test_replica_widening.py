"""Parquet replicas of a topic whose column widened (int64, then double) migrated to the new
type: a failure or a SIGKILL in the middle of the migration, then the next run; two stores
feeding one replica, one of them widened; and a type change that is no widening."""

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
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType
from structlog.testing import capture_logs

from plateau_core import SegmentState, Store
from plateau_spark.replication import Replicator, Target
from plateau_spark.replication.parquet_migration import read_record
from tests.bridge_support import REPO
from tests.spark.conftest import s3_bucket_target, write_segments
from tests.spark.test_json_numbers import FRACTIONS, WHOLE, land, rows_of
from tests.support import batch

# A run in a process of its own that kills itself with SIGKILL once the migration has
# rewritten `after` files.
_CHILD = """
import os, signal, sys
from pathlib import Path
from plateau_core import Store
from plateau_spark.replication import Replicator, Target

data, target, after = sys.argv[1:4]
rewritten = 0

def step(name: str) -> None:
    global rewritten
    if name == "migration_file_rewritten":
        rewritten += 1
        if rewritten == int(after):
            os.kill(os.getpid(), signal.SIGKILL)

Replicator(Store.open(Path(data)), Target.parse(target), step=step, file_bytes=1).run_once()
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
    with pytest.raises(InjectedError):
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
    child = _kill_after(tmp_path, target, files=2)
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


def _kill_after(tmp_path: Path, target: Target, files: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "data"), target.uri, str(files)],
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
