"""A replication run keeps one topic's trouble to that topic, and one store's leftovers to
that store: a column type the target refuses or a failure half way through a topic holds
back only that topic; a store's run leaves another store's staged objects alone; a temp
file a killed write left in a local replica goes at the next run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import fs
from structlog.testing import capture_logs

from plateau_core import SegmentState, Store
from plateau_spark.errors import TopicReplicationError
from plateau_spark.replication import Replicator, Target
from plateau_spark.replication.files import pending_days, replica_dir
from plateau_spark.replication.iceberg_files import data_dir
from plateau_spark.replication.target import ABANDONED_TEMP_S, STAGING_DIR
from tests.bridge_support import REPO
from tests.spark.conftest import s3_bucket_target, write_segments
from tests.spark.iceberg_support import replicator, table_keys
from tests.spark.test_replica_widening import fail_after
from tests.spark.test_replica_widening import three_files_then_fractions as widened
from tests.support import batch

US = 1_700_000_000_123_456  # 2023-11-14T22:13:20.123456Z


def _sealed(store: Store, topic: str, rows: int = 3, **extra: pa.Array) -> None:
    write_segments(store, topic, 0, [batch(range(rows), extra=extra)], roll_rows=rows)


def _replicated(store: Store, topic: str) -> int:
    return len(store.manifest.segments(topic, states=(SegmentState.REPLICATED,)))


def test_a_column_zoned_other_than_utc_replicates_to_iceberg_as_timestamptz(
    tmp_path: Path,
) -> None:
    """pyiceberg refused the table (timestamptz takes UTC only), and that stopped the run
    before any topic: the column holds the same instants in UTC, as Spark reads them."""
    store = Store.open(tmp_path / "data")
    paris = pa.array([US, None, -1], pa.timestamp("us", tz="Europe/Paris"))
    _sealed(store, "a", at=paris)
    _sealed(store, "b")
    job = replicator(store, tmp_path / "warehouse")
    assert job.run_once().rows == 6
    held = job.table("a").scan().to_arrow().sort_by("offset")
    assert held.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert held.column("at").to_pylist() == paris.cast(pa.timestamp("us", "UTC")).to_pylist()
    assert sum(table_keys(job.table("b")).values()) == 3
    store.close()


def test_a_topic_that_fails_in_iceberg_holds_back_only_itself(tmp_path: Path) -> None:
    """Anything a topic raises that is not the target's I/O (here at its first step) ended
    the run, and the topics sorted after it waited with it, run after run."""
    store = Store.open(tmp_path / "data")
    for topic in ("a", "b"):
        _sealed(store, topic)
    calls: list[str] = []

    def first_topic_fails(step: str) -> None:
        calls.append(step)
        if calls.count("planned") == 1 and step == "planned":
            raise RuntimeError("unexpected")

    with capture_logs() as logs, pytest.raises(TopicReplicationError, match=r"'a'.*unexpected"):
        replicator(store, tmp_path / "warehouse", step=first_topic_fails).run_once()
    assert [e["topic"] for e in logs if e["event"] == "iceberg_topic_failed"] == ["a"]
    assert (_replicated(store, "a"), _replicated(store, "b")) == (0, 1)
    job = replicator(store, tmp_path / "warehouse")
    assert job.run_once().rows == 3
    assert sum(table_keys(job.table("a")).values()) == 3
    store.close()


def test_a_topic_that_fails_in_a_parquet_replica_holds_back_only_itself(tmp_path: Path) -> None:
    """A migration that fails (a topic's own trouble, not the target's I/O) ended the run
    before the topics after it."""
    store = Store.open(tmp_path / "data")
    target = Target.parse(str(tmp_path / "replica"))
    widened(store, Replicator(store, target, file_bytes=1).run_once)
    _sealed(store, "k")
    failing = Replicator(store, target, file_bytes=1, step=fail_after(1))
    with capture_logs() as logs, pytest.raises(TopicReplicationError, match=r"'j'.*injected"):
        failing.run_once()
    assert [e["topic"] for e in logs if e["event"] == "replication_topic_failed"] == ["j"]
    assert _replicated(store, "k") == 1
    assert not store.manifest.segments("k", states=(SegmentState.SEALED,))
    assert store.manifest.segments("j", states=(SegmentState.SEALED,))
    Replicator(store, target, file_bytes=1).run_once()
    assert not store.manifest.segments("j", states=(SegmentState.SEALED,))
    store.close()


def _staged(target: Target, filesystem: fs.FileSystem, store: Store) -> str:
    """An object as a run of `store` stages it between its upload and its move."""
    staging = target.for_store(store.manifest.store_id()).staging
    assert staging.startswith(f"{STAGING_DIR}/")
    staged = target.path(f"{staging}/0123-00000000000000000000-00000000000000000002.parquet")
    with filesystem.open_output_stream(staged) as out:
        out.write(b"half of a replica file")
    return staged


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_a_run_leaves_another_stores_staged_objects_alone(
    tmp_path: Path, s3_endpoint: str, kind: str
) -> None:
    """Two stores replicating into one bucket: a run emptied the whole staging prefix, and
    with it the other store's objects between their upload and their move."""
    target = s3_bucket_target(s3_endpoint)
    mine, other = Store.open(tmp_path / "mine"), Store.open(tmp_path / "other")
    _sealed(mine, "t")
    filesystem = target.filesystem()
    where = target if kind == "parquet" else target.at(f"s3://{target.root}/plateau/t")
    theirs = _staged(where, filesystem, other)
    left = _staged(where, filesystem, mine)  # by a killed run of this store
    if kind == "parquet":
        Replicator(mine, target).run_once()
    else:
        replicator(mine, target).run_once()
    assert filesystem.get_file_info(theirs).type == fs.FileType.File
    assert filesystem.get_file_info(left).type == fs.FileType.NotFound
    assert _replicated(mine, "t") == 1
    mine.close()
    other.close()


# Kills itself with SIGKILL half way through writing a file of the local target.
_KILLED_WRITE = """
import os, signal, sys
from plateau_spark.replication import Target

root, relative = sys.argv[1:3]

def produce(out):
    out.write(b"half a file")
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)

Target.parse(root).write(Target.parse(root).filesystem(), relative, produce)
"""


def _killed_write(root: Path, relative: str) -> Path:
    """The temp file a write killed with SIGKILL left, aged past ABANDONED_TEMP_S."""
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITE, str(root), relative],
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == -9
    (left,) = (root / relative).parent.glob(".tmp-*")
    old = time.time() - ABANDONED_TEMP_S - 60
    os.utime(left, (old, old))
    return left


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_a_temp_file_a_killed_write_left_goes_at_the_next_run(tmp_path: Path, kind: str) -> None:
    """Readers skip it, and nothing removed it. A young one, or one whose pid is running,
    may be another writer's and stays."""
    store = Store.open(tmp_path / "data")
    _sealed(store, "t")
    (day,) = pending_days(store.manifest.segments("t"))
    if kind == "parquet":
        root, folder = tmp_path / "replica", replica_dir("t", day, 0)
    else:
        root, folder = tmp_path / "warehouse" / "plateau" / "t", data_dir(day, 0)
    left = _killed_write(root, f"{folder}/00000000000000000000-00000000000000000002.parquet")
    dead_pid = left.name.removeprefix(".tmp-").split("-", 1)[0]
    young = left.with_name(f".tmp-{dead_pid}-young.parquet")
    young.write_bytes(b"")
    live = root / folder / f".tmp-{os.getpid()}-live.parquet"
    live.write_bytes(b"")
    old = time.time() - ABANDONED_TEMP_S - 60
    os.utime(live, (old, old))
    with capture_logs() as logs:
        if kind == "parquet":
            Replicator(store, Target.parse(str(root))).run_once()
        else:
            replicator(store, tmp_path / "warehouse").run_once()
    assert not left.exists() and young.exists() and live.exists()
    removed = [e for e in logs if e["event"].endswith("temp_file_removed")]
    assert [(e["topic"], e["partition"]) for e in removed] == [("t", 0)]
    assert _replicated(store, "t") == 1
    store.close()
