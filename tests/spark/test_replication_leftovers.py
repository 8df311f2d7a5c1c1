"""What killed writes and older versions leave in a target, swept by later runs: the temp
file of a Parquet migration killed half way through rewriting a file, of an ordinary write
found too young by the next run, of an Iceberg column replacement killed half way, and the
objects versions that staged at the root of `_plateau_staging/` left there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from pyarrow import fs
from structlog.testing import capture_logs

from plateau_core import Store
from plateau_spark.replication import Replicator, Target
from plateau_spark.replication.parquet_migration import read_record
from plateau_spark.replication.target import ABANDONED_TEMP_S, STAGING_DIR
from tests.bridge_support import REPO
from tests.spark.conftest import s3_bucket_target
from tests.spark.iceberg_support import replicator
from tests.spark.test_json_numbers import FRACTIONS, WHOLE, land, rows_of
from tests.spark.test_replica_widening import latency_types, parquet_target, replica_rows

# A run in a process of its own that kills itself with SIGKILL once the migration has
# written a rewritten file's rows, before the file is complete under its name.
_KILLED_REWRITE = """
import os, signal, sys
from pathlib import Path
from plateau_core import Store
from plateau_spark.replication import Replicator, Target, parquet_migration

rewrite = parquet_migration.rewrite_parquet

def killed(source, out, fields, compression):
    rewrite(source, out, fields, compression)
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)

parquet_migration.rewrite_parquet = killed
data, target = sys.argv[1:3]
Replicator(Store.open(Path(data)), Target.parse(target), file_bytes=1).run_once()
"""


# The same, killed once a run's own write (no migration) has written a file's rows.
_KILLED_WRITE = """
import os, signal, sys
from pathlib import Path
from plateau_core import Store
from plateau_spark.replication import Replicator, Target, files

write = files._write_parquet

def killed(stream, task, day):
    write(stream, task, day)
    stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)

files._write_parquet = killed
data, target = sys.argv[1:3]
Replicator(Store.open(Path(data)), Target.parse(target), file_bytes=1).run_once()
"""

# An Iceberg run killed once its column replacement has written a rewritten file's rows.
_KILLED_REPLACEMENT = """
import os, signal, sys
from pathlib import Path
from plateau_core import Store
from plateau_spark.replication import Target, iceberg_migration
from tests.spark.iceberg_support import replicator

rewrite = iceberg_migration.rewrite_parquet

def killed(source, out, fields, compression):
    rewrite(source, out, fields, compression)
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)

iceberg_migration.rewrite_parquet = killed
data, target = sys.argv[1:3]
replicator(Store.open(Path(data)), Target.parse(target), file_bytes=1).run_once()
"""


def _kill_rewrite(
    data: Path, target: Target, endpoint: str | None, script: str = _KILLED_REWRITE
) -> None:
    env = dict(os.environ)
    if endpoint is not None:  # the child reaches the test's S3 server as the target does
        env.update(
            AWS_ENDPOINT_URL=endpoint,
            AWS_ACCESS_KEY_ID="k",
            AWS_SECRET_ACCESS_KEY="s",
            AWS_REGION="us-east-1",
        )
    child = subprocess.run(
        [sys.executable, "-c", script, str(data), target.uri],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]


def _files(target: Target, under: str = "") -> list[str]:
    """Every file under `under` of the target, relative to its root."""
    filesystem = target.filesystem()
    selector = fs.FileSelector(target.path(under).rstrip("/"), recursive=True, allow_not_found=True)
    return sorted(
        i.path.removeprefix(target.root + "/")
        for i in filesystem.get_file_info(selector)
        if i.type == fs.FileType.File
    )


def _age(path: Path) -> None:
    old = time.time() - ABANDONED_TEMP_S - 60
    os.utime(path, (old, old))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_temp_file_of_a_migration_killed_half_way_goes_at_a_later_run(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """The rewritten file's folder (partition 1) holds no pending rows, and only the
    pending folders were swept: the temp file stayed. A run soon after the kill finds it
    too young and completes the migration; a run once it is old removes it."""
    store = Store.open(tmp_path / "data")
    target = parquet_target(where, tmp_path, request)
    land(store, "j", WHOLE, 0, partition=1)
    Replicator(store, target, file_bytes=1).run_once()
    land(store, "j", FRACTIONS, 0, partition=0)
    store.close()
    endpoint = request.getfixturevalue("s3_endpoint") if where == "s3" else None
    _kill_rewrite(tmp_path / "data", target, endpoint)
    record = read_record(target, target.filesystem(), "j")
    assert record is not None and not record.complete
    if where == "local":
        (temp,) = (tmp_path / "replica" / "j").rglob(".tmp-*")
        assert temp.parent.name == "partition=1"
    # On S3 the rewrite was an upload to the store's staging folder, never completed.

    store = Store.open(tmp_path / "data")
    assert Replicator(store, target, file_bytes=1).run_once().files_migrated == 1
    record = read_record(target, target.filesystem(), "j")
    assert record is not None and record.complete
    if where == "local":
        relative = str(temp.relative_to(tmp_path / "replica"))
        assert temp.exists() and record.temp_files == (relative,)
        _age(temp)

    land(store, "j", FRACTIONS, 2, partition=0)
    with capture_logs() as logs:
        Replicator(store, target, file_bytes=1).run_once()
    removed = [e for e in logs if e["event"] == "replica_temp_file_removed"]
    if where == "local":
        assert not temp.exists()
        assert [(e["topic"], e["partition"], e["path"]) for e in removed] == [("j", 1, relative)]
    else:
        assert removed == []
    record = read_record(target, target.filesystem(), "j")
    assert record is not None and record.complete and record.temp_files == ()
    left = [p for p in _files(target) if not p.rsplit("/", 1)[-1].startswith("_plateau")]
    assert all(p.endswith(".parquet") and "/partition=" in p for p in left), left
    assert latency_types(target) == ["double"] * 3
    assert rows_of(replica_rows(target)) == rows_of(store.read("j").to_table())
    store.close()


def test_the_temp_file_of_a_write_killed_before_a_run_that_came_soon_goes_later(
    tmp_path: Path,
) -> None:
    """The run after the kill found the temp file too young to be a killed write's, wrote
    its folder's rows and so left no pending rows there: no sweep of pending folders looks
    in it again. It names the file in the record instead, and a later run writing the topic
    (to another folder) removes it once old, with no listing of the topic."""
    store = Store.open(tmp_path / "data")
    target = Target.parse(str(tmp_path / "replica"))
    land(store, "j", WHOLE, 0, partition=0)
    store.close()
    _kill_rewrite(tmp_path / "data", target, None, _KILLED_WRITE)
    (temp,) = (tmp_path / "replica" / "j").rglob(".tmp-*")
    relative = str(temp.relative_to(tmp_path / "replica"))
    assert temp.parent.name == "partition=0"

    store = Store.open(tmp_path / "data")
    with capture_logs() as logs:
        assert Replicator(store, target, file_bytes=1).run_once().segments == 1
    assert not [e for e in logs if e["event"] == "replica_temp_file_removed"]
    record = read_record(target, target.filesystem(), "j")
    assert temp.exists() and record is not None and record.temp_files == (relative,)

    land(store, "j", WHOLE, 0, partition=1)  # the next run writes partition 1's folder only
    with capture_logs() as logs:
        Replicator(store, target, file_bytes=1).run_once()
    assert temp.exists(), "removed while young: it may be a live writer's of another host"
    _age(temp)
    land(store, "j", WHOLE, 2, partition=1)
    with capture_logs() as logs:
        Replicator(store, target, file_bytes=1).run_once()
    removed = [e for e in logs if e["event"] == "replica_temp_file_removed"]
    assert [(e["topic"], e["partition"], e["path"]) for e in removed] == [("j", 0, relative)]
    assert not temp.exists()
    record = read_record(target, target.filesystem(), "j")
    assert record is not None and record.complete and record.temp_files == ()
    assert rows_of(replica_rows(target)) == rows_of(store.read("j").to_table())
    store.close()


def test_the_temp_file_of_an_iceberg_column_replacement_killed_half_way_goes_at_compaction(
    tmp_path: Path,
) -> None:
    """The replacement rewrote partition 1's file, whose folder no pending rows go to: the
    next run's sweep of pending folders never looks there. Compaction's listing of every
    data folder removes it once a killed write's (old, its pid gone), not before."""
    store = Store.open(tmp_path / "data")
    warehouse = Target.parse(str(tmp_path / "warehouse"))
    land(store, "j", WHOLE, 0, partition=1)
    replicator(store, warehouse, file_bytes=1).run_once()
    land(store, "j", FRACTIONS, 0, partition=0)
    store.close()
    _kill_rewrite(tmp_path / "data", warehouse, None, _KILLED_REPLACEMENT)
    (temp,) = (tmp_path / "warehouse").rglob(".tmp-*")
    assert temp.parent.name == "partition=1"

    store = Store.open(tmp_path / "data")
    job = replicator(store, warehouse, file_bytes=1)
    assert job.run_once().files_migrated == 1
    assert temp.exists()
    with capture_logs() as logs:
        job.maintain()
    assert temp.exists(), "removed while young: it may be a live writer's of another host"
    _age(temp)
    with capture_logs() as logs:
        job.maintain()
    removed = [e for e in logs if e["event"] == "iceberg_temp_file_removed"]
    table = job.table("j")
    relative = str(temp.relative_to(Path(table.location().removeprefix("file://"))))
    assert [(e["topic"], e["partition"], e["path"]) for e in removed] == [("j", 1, relative)]
    assert not temp.exists()
    assert rows_of(table.scan().to_arrow()) == rows_of(store.read("j").to_table())
    store.close()


_NAME = "00000000000000000000-00000000000000000002.parquet"


def _older_leftovers(target: Target, where: str) -> list[str]:
    """What versions staging at the root of _plateau_staging/ left there (relative paths of
    what a sweep removes): on S3 objects `{uuid hex}-{name}`, in a local target a Spark
    staging folder `{uuid hex}/`."""
    filesystem = target.filesystem()
    if where == "s3":
        names = [
            f"{STAGING_DIR}/{uuid.uuid4().hex}-00000000000000000000-00000000000000000002.parquet"
        ]
        for name in names:
            with filesystem.open_output_stream(target.path(name)) as out:
                out.write(b"half of a replica file")
        return names
    folder = f"{STAGING_DIR}/{uuid.uuid4().hex}"
    staged = f"{folder}/topic-0/date=2023-11-14/partition=0/part-00000.snappy.parquet"
    filesystem.create_dir(target.path(staged.rsplit("/", 1)[0]))
    with filesystem.open_output_stream(target.path(staged)) as out:
        out.write(b"a file Spark staged")
    return [folder]


def _of_a_store(target: Target, store_id: str) -> str:
    """An object another store is staging in its own folder now."""
    staged = f"{STAGING_DIR}/{store_id}/{uuid.uuid4().hex}-{_NAME}"
    filesystem = target.filesystem()
    filesystem.create_dir(target.path(staged.rsplit("/", 1)[0]))
    with filesystem.open_output_stream(target.path(staged)) as out:
        out.write(b"being staged")
    return staged


def _make_old(target: Target, relative: str) -> None:
    """Untouched for longer than ABANDONED_TEMP_S (a local path and what is in it)."""
    root = Path(target.path(relative))
    for path in [root, *root.rglob("*")]:
        _age(path)


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
@pytest.mark.parametrize("where", ["local", "s3"])
def test_what_older_versions_staged_at_the_staging_root_goes_once_old(
    tmp_path: Path, where: str, kind: str, request: pytest.FixtureRequest
) -> None:
    """Nothing removed them: each store empties only its own folder. Young ones stay (an
    older version's run may be writing them), and so does every store's folder."""
    store = Store.open(tmp_path / "data")
    land(store, "j", WHOLE, 0)
    if where == "s3":
        base = s3_bucket_target(request.getfixturevalue("s3_endpoint"))
    else:
        base = Target.parse(str(tmp_path / "replica"))
    # Where the run stages: the target's root, or the topic's table location.
    where_staged = base if kind == "parquet" else base.at(f"{base.uri.rstrip('/')}/plateau/j")
    older = _older_leftovers(where_staged, where)
    another_store = _of_a_store(where_staged, str(uuid.uuid4()))

    def run(now: float | None = None) -> list[MutableMapping[str, Any]]:
        with capture_logs() as logs:
            if now is not None:  # S3 keeps its own times: the sweep is asked at a later one
                where_staged.sweep_older_staging(where_staged.filesystem(), now=now)
            elif kind == "parquet":
                Replicator(store, base).run_once()
            else:
                replicator(store, base).run_once()
        return [e for e in logs if e["event"] == "replica_older_staging_removed"]

    assert run() == []  # young: an older version may still be writing them
    staged = _files(where_staged, STAGING_DIR)
    assert another_store in staged
    assert all(any(p.startswith(o) for p in staged) for o in older)

    if where == "local":
        for relative in older:
            _make_old(where_staged, relative)
        _make_old(where_staged, another_store)
        land(store, "j", WHOLE, 2)
        removed = run()
    else:
        removed = run(now=time.time() + ABANDONED_TEMP_S + 60)
    assert sorted(str(e["path"]) for e in removed) == sorted(older)
    assert _files(where_staged, STAGING_DIR) == [another_store]
    store.close()
