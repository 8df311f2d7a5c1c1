"""Iceberg replication that dies at each step (an exception, or kill -9 of the process), a
commit that another writer gets ahead of, and `plateau replicate` killed mid-run: the next
run leaves every sealed row in the table exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from structlog.testing import capture_logs

from bridge.cli import main
from plateau_core import SegmentState, Store
from plateau_spark.errors import ReplicaOwnerError
from plateau_spark.replication import (
    IcebergSettings,
    Target,
    TargetError,
    iceberg_commit,
    iceberg_maintenance,
)
from plateau_spark.replication.iceberg_commit import committed_offsets
from tests.bridge_support import REPO
from tests.postgres_server import PostgresServer
from tests.spark.conftest import minute_batches, write_segments
from tests.spark.iceberg_support import data_files, replicator, table_keys
from tests.spark.test_commands import config_file
from tests.spark.test_replication import stored_keys
from tests.support import batch

STEPS = ("planned", "file_written", "files_written", "committed")

# A replication run in a process of its own that kills itself with SIGKILL at one step.
_CHILD = """
import os, signal, sys
from pathlib import Path
from plateau_core import Store
from plateau_spark.replication import IcebergReplicator, Target

data, warehouse, at = sys.argv[1:4]

def step(name: str) -> None:
    if name == at:
        os.kill(os.getpid(), signal.SIGKILL)

job = IcebergReplicator(Store.open(Path(data)), Target.parse(warehouse), step=step, file_bytes=1)
job.run_once()
"""


def two_runs_of_data(store: Store, first: bool) -> None:
    """Run one: partitions 0 and 1, three segments each; run two: two more each."""
    for partition in (0, 1):
        if first:
            write_segments(store, "t", partition, minute_batches(partition, 3), roll_rows=100)
        else:
            more = [batch(range(300, 400)), batch(range(400, 500))]
            write_segments(store, "t", partition, more, roll_rows=100)


def sealed(store: Store) -> int:
    return len(store.manifest.segments("t", states=(SegmentState.SEALED,)))


def check_after_failure(
    store: Store, warehouse: Path, step: str, settings: IcebergSettings | None = None
) -> None:
    """What the failed run left, then the re-run: every row once, offsets moved on."""
    job = replicator(store, warehouse, settings=settings)
    table = job.table("t")
    assert sealed(store) == 4, "a segment was marked replicated by the failed run"
    written = {p for p in (warehouse / "plateau" / "t" / "data").rglob("*.parquet")}
    committed = committed_offsets(table)
    orphans = len(written) - len(data_files(table))
    if step == "committed":
        # Committed, not recorded: the table already holds the rows.
        assert committed == {0: 500, 1: 500}
        assert table_keys(table) == stored_keys(store)
    else:
        assert committed == {0: 300, 1: 300}
        assert orphans == {"planned": 0, "file_written": 1, "files_written": 4}[step]
    report = job.run_once()
    table.refresh()
    assert table_keys(table) == stored_keys(store)
    assert committed_offsets(table) == {0: 500, 1: 500}
    assert sealed(store) == 0
    assert report.orphans_removed == orphans
    if step == "committed":
        assert report.files == 0 and report.segments == 4
    on_disk = sorted(
        str(p.relative_to(warehouse / "plateau" / "t" / "data"))
        for p in (warehouse / "plateau" / "t" / "data").rglob("*.parquet")
    )
    assert on_disk == data_files(table), "a data file no snapshot reads was left behind"


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql"])
@pytest.mark.parametrize("step", STEPS)
def test_failure_at_each_step_then_rerun(
    tmp_path: Path, step: str, catalog: str, request: pytest.FixtureRequest
) -> None:
    settings = _catalog(catalog, tmp_path, request)
    store = Store.open(tmp_path / "data")
    warehouse = tmp_path / "warehouse"
    two_runs_of_data(store, first=True)
    replicator(store, warehouse, file_bytes=1, settings=settings).run_once()
    two_runs_of_data(store, first=False)

    def fail(name: str) -> None:
        if name == step:
            raise OSError(f"injected failure at {name}")

    with pytest.raises(TargetError, match="injected failure"):
        replicator(store, warehouse, step=fail, file_bytes=1, settings=settings).run_once()
    check_after_failure(store, warehouse, step, settings)
    store.close()


def _catalog(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> IcebergSettings:
    """A SQL catalog of its own: SQLite in the test's folder, or a PostgreSQL database."""
    if kind == "sqlite":
        return IcebergSettings(catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    server: PostgresServer = request.getfixturevalue("postgres")
    return IcebergSettings(catalog_uri=server.new_database("iceberg"))


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_at_each_step_then_rerun(tmp_path: Path, step: str) -> None:
    store = Store.open(tmp_path / "data")
    warehouse = tmp_path / "warehouse"
    two_runs_of_data(store, first=True)
    replicator(store, warehouse, file_bytes=1).run_once()
    two_runs_of_data(store, first=False)
    store.close()
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "data"), str(warehouse), step],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    store = Store.open(tmp_path / "data")
    check_after_failure(store, warehouse, step)
    store.close()


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql"])
def test_a_node_committing_first_makes_the_other_retry_on_the_new_snapshot(
    tmp_path: Path, catalog: str, request: pytest.FixtureRequest
) -> None:
    """Two plateau nodes consuming one Kafka topic, their own stores and partitions, one
    catalog and warehouse: node B commits between node A's load of the table and A's
    commit. A's commit is refused by the catalog, retried on B's snapshot, and the offsets
    of both survive."""
    shared = _catalog(catalog, tmp_path, request)
    warehouse = tmp_path / "warehouse"
    node_a = Store.open(tmp_path / "a")
    for partition in (0, 1):
        node_a.manifest.record_source_topic("t", partition, "clicks", "id-1")
    two_runs_of_data(node_a, first=True)
    node_b = Store.open(tmp_path / "b")
    node_b.manifest.record_source_topic("t", 2, "clicks", "id-1")
    write_segments(node_b, "t", 2, minute_batches(2, 1), roll_rows=100)
    done: list[int] = []

    def node_b_commits(name: str) -> None:
        if name == "files_written" and not done:
            done.append(replicator(node_b, warehouse, settings=shared).run_once().rows)

    with capture_logs() as logs:
        report = replicator(node_a, warehouse, step=node_b_commits, settings=shared).run_once()
    assert report.rows == 600 and done == [100]
    assert [e["topic"] for e in logs if e["event"] == "iceberg_commit_conflict"] == ["t"]
    table = replicator(node_a, warehouse, settings=shared).table("t")
    assert committed_offsets(table) == {0: 300, 1: 300, 2: 100}
    assert table_keys(table) == stored_keys(node_a) + stored_keys(node_b)
    node_a.close()
    node_b.close()


def test_a_table_another_node_creates_first_is_loaded_not_taken_for_a_lost_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two nodes consuming one topic find no table; node B creates it (and commits) while
    node A is about to: A finds B's metadata at the location, and since the catalog lists
    the table now, A commits to it instead of refusing it as a table the catalog lost."""
    shared = IcebergSettings(catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    warehouse = tmp_path / "warehouse"
    node_a = Store.open(tmp_path / "a")
    node_a.manifest.record_source_topic("t", 0, "clicks", "id-1")
    write_segments(node_a, "t", 0, minute_batches(0, 1), roll_rows=100)
    node_b = Store.open(tmp_path / "b")
    node_b.manifest.record_source_topic("t", 1, "clicks", "id-1")
    write_segments(node_b, "t", 1, minute_batches(1, 1), roll_rows=100)
    job = replicator(node_a, warehouse, settings=shared)
    vacant = job._vacant

    def node_b_first(catalog: Any, topic: str, location: str) -> None:
        assert replicator(node_b, warehouse, settings=shared).run_once().segments == 1
        vacant(catalog, topic, location)

    monkeypatch.setattr(job, "_vacant", node_b_first)
    assert job.run_once().segments == 1
    assert committed_offsets(job.table("t")) == {0: 100, 1: 100}
    node_a.close()
    node_b.close()


def test_a_schema_change_another_node_commits_ahead_of_fails_the_run_not_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node A adds a column while node B adds another to the same table: the catalog
    refuses A's schema commit. That is a failed run (TargetError, which plateau replicate on an
    interval logs and tries again), not an exception that ends the process; the next run
    adds the column."""
    shared = IcebergSettings(catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    warehouse = tmp_path / "warehouse"
    node_a = Store.open(tmp_path / "a")
    node_b = Store.open(tmp_path / "b")
    for node, partition in ((node_a, 0), (node_b, 1)):
        node.manifest.record_source_topic("t", partition, "clicks", "id-1")
        write_segments(node, "t", partition, minute_batches(partition, 1), roll_rows=100)
        replicator(node, warehouse, settings=shared).run_once()
    extra = {"user": pa.array([f"u{i}" for i in range(100)])}
    write_segments(node_a, "t", 0, [batch(range(100, 200), extra=extra)], roll_rows=100)
    level = {"level": pa.array(["info"] * 100)}
    write_segments(node_b, "t", 1, [batch(range(100, 200), extra=level)], roll_rows=100)
    real = iceberg_commit.check_evolution
    done: list[int] = []

    def node_b_commits_first(*args: Any) -> list[str]:
        monkeypatch.setattr(iceberg_commit, "check_evolution", real)
        done.append(replicator(node_b, warehouse, settings=shared).run_once().segments)
        return real(*args)

    monkeypatch.setattr(iceberg_commit, "check_evolution", node_b_commits_first)
    with pytest.raises(TargetError, match="another writer"):
        replicator(node_a, warehouse, settings=shared).run_once()
    assert done == [1]
    assert replicator(node_a, warehouse, settings=shared).run_once().segments == 1
    table = replicator(node_a, warehouse, settings=shared).table("t")
    assert {"user", "level"} <= set(table.schema().column_names)
    assert committed_offsets(table) == {0: 200, 1: 200}
    node_a.close()
    node_b.close()


def test_another_store_committing_a_produced_topic_first_refuses_the_commit(
    tmp_path: Path,
) -> None:
    """Another store commits a produced topic's first rows between this run's look at the
    table and its commit: the commit is refused, naming both stores, and nothing of this
    store is marked replicated."""
    shared = IcebergSettings(catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    warehouse = tmp_path / "warehouse"
    node_a = Store.open(tmp_path / "a")
    two_runs_of_data(node_a, first=True)
    node_b = Store.open(tmp_path / "b")
    write_segments(node_b, "t", 2, minute_batches(2, 1), roll_rows=100)

    def node_b_commits(name: str) -> None:
        if name == "files_written":
            replicator(node_b, warehouse, settings=shared).run_once()

    job = replicator(node_a, warehouse, step=node_b_commits, settings=shared)
    with pytest.raises(ReplicaOwnerError, match=node_b.manifest.store_id()):
        job.run_once()
    table = replicator(node_b, warehouse, settings=shared).table("t")
    assert committed_offsets(table) == {2: 100}
    assert sealed(node_a) == 6
    node_a.close()
    node_b.close()


def test_replicate_command_killed_mid_run_then_rerun(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    for partition in (0, 1):
        batches = [batch(range(i * 200, (i + 1) * 200)) for i in range(60)]
        write_segments(store, "web-clicks", partition, batches, roll_rows=200)
    store.close()
    warehouse = tmp_path / "warehouse"
    config = config_file(tmp_path, target=str(warehouse), format="iceberg", file_size="1")
    command = [sys.executable, "-m", "bridge.cli", "--log-level", "WARNING", "replicate"]
    process = subprocess.Popen(
        [*command, "-c", str(config), "--interval", "1h"],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(warehouse.rglob("*.parquet")):
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "replicate wrote nothing within 120 s"
            time.sleep(0.01)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    store = Store.open(tmp_path / "data")
    states = Counter(s.state for s in store.manifest.segments("web-clicks"))
    assert sum(states.values()) == 120

    assert main(["--log-level", "WARNING", "replicate", "-c", str(config), "--once"]) == 0
    table = replicator(store, Target.parse(str(warehouse))).table("web-clicks")
    assert table_keys(table) == stored_keys(store, "web-clicks")
    assert committed_offsets(table) == {0: 12_000, 1: 12_000}
    assert sealed_count(store) == 0
    store.close()


def sealed_count(store: Store) -> int:
    return len(store.manifest.segments("web-clicks", states=(SegmentState.SEALED,)))


def test_compact_command_and_its_refusal_for_parquet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store.open(tmp_path / "data")
    warehouse = tmp_path / "warehouse"
    config = config_file(tmp_path, target=str(warehouse), format="iceberg")
    for run in range(3):
        write_segments(store, "web-clicks", 0, [batch(range(run * 100, run * 100 + 100))], 100)
        assert main(["replicate", "-c", str(config), "--once"]) == 0
    capsys.readouterr()
    assert main(["replicate", "-c", str(config), "--compact"]) == 0
    out = capsys.readouterr().out
    assert '"topic": "web-clicks"' in out and '"files_rewritten": 3' in out
    table = replicator(store, Target.parse(str(warehouse))).table("web-clicks")
    assert len(data_files(table)) == 1
    assert table_keys(table) == stored_keys(store, "web-clicks")

    parquet = config_file(tmp_path, target=str(tmp_path / "replica"))
    assert main(["replicate", "-c", str(parquet), "--compact"]) == 2
    assert "--compact needs replication.format: iceberg" in capsys.readouterr().err
    store.close()


def test_a_compaction_another_writer_got_ahead_of_is_named_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path / "data")
    warehouse = tmp_path / "warehouse"
    config = config_file(tmp_path, target=str(warehouse), format="iceberg")
    for run in range(3):
        write_segments(store, "web-clicks", 0, [batch(range(run * 100, run * 100 + 100))], 100)
        assert main(["replicate", "-c", str(config), "--once"]) == 0
    table = replicator(store, Target.parse(str(warehouse))).table("web-clicks")
    before = data_files(table)
    rewrite = iceberg_maintenance._rewrite

    def another_writer_commits(*args: Any, **kwargs: Any) -> list[str]:
        # Another node's commit lands while this compaction writes its files.
        foreign = pa.Table.from_pylist(
            [{"partition": 7, "offset": 0, "timestamp": datetime(2023, 11, 14, tzinfo=UTC)}],
            schema=table.schema().as_arrow(),
        )
        path = warehouse / "plateau" / "web-clicks" / "data" / "backfill.parquet"
        pq.write_table(foreign, path)
        table.add_files([str(path)])
        return rewrite(*args, **kwargs)

    monkeypatch.setattr(iceberg_maintenance, "_rewrite", another_writer_commits)
    capsys.readouterr()
    assert main(["replicate", "-c", str(config), "--compact"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "plateau replicate: topic 'web-clicks': another writer committed" in err
    table.refresh()
    assert [f for f in data_files(table) if f != "backfill.parquet"] == before
    compacted = list((warehouse / "plateau" / "web-clicks" / "data").rglob("*.c*.parquet"))
    assert not compacted, "the refused compaction left its files"
    store.close()


def test_files_of_a_failed_run_whose_segments_retention_deleted_are_swept_by_maintenance(
    tmp_path: Path,
) -> None:
    """A run fails after writing its files; before the next run, retention deletes the
    segments those files hold (a store over its hard limit). No run will find the files
    through its segments again; maintenance removes them once they are an hour old."""
    store = Store.open(tmp_path / "data")
    warehouse = tmp_path / "warehouse"
    two_runs_of_data(store, first=True)
    replicator(store, warehouse, file_bytes=1).run_once()
    two_runs_of_data(store, first=False)

    def fail(name: str) -> None:
        if name == "files_written":
            raise OSError("injected failure at files_written")

    with pytest.raises(TargetError, match="injected failure"):
        replicator(store, warehouse, step=fail, file_bytes=1).run_once()
    unreplicated = store.manifest.segments("t", states=(SegmentState.SEALED,))
    assert len(unreplicated) == 4
    store.manifest.mark_deleting([s.id for s in unreplicated])
    for segment in unreplicated:
        (store.data_dir / segment.path).unlink()
    store.manifest.remove([s.id for s in unreplicated])

    data = warehouse / "plateau" / "t" / "data"
    assert replicator(store, warehouse).run_once().orphans_removed == 0  # nothing to plan
    table = replicator(store, warehouse).table("t")
    on_disk = {str(p.relative_to(data)) for p in data.rglob("*.parquet")}
    left = on_disk - set(data_files(table))
    assert len(left) == 4
    keep = IcebergSettings(snapshot_retention_s=7 * 86400, small_file_bytes=1)  # no compaction
    # Younger than an hour: maybe a run in progress elsewhere, so kept.
    assert replicator(store, warehouse, settings=keep).maintain()["t"].files_deleted == 0
    hour_ago = time.time() - 2 * 3600
    for name in left:
        os.utime(data / name, (hour_ago, hour_ago))
    done = replicator(store, warehouse, settings=keep).maintain()["t"]
    assert done.files_deleted == 4
    table.refresh()
    assert sorted(str(p.relative_to(data)) for p in data.rglob("*.parquet")) == data_files(table)
    assert table_keys(table) == stored_keys(store)
    store.close()
