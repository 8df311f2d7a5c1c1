"""The manifest on a real PostgreSQL server, where SQLite's file-level behaviour does not
apply: migrations raced by several openers, an older manifest upgraded, a rebuild into an
empty database, and two processes sharing one manifest. (Every test of tests/core that uses
the `store` fixture also runs on PostgreSQL.)"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import create_engine, text

from plateau_core import Store, WriterPolicy
from plateau_core.errors import ManifestUnusableError
from plateau_core.manifest import Manifest, SegmentState
from plateau_core.manifest.migrations import LATEST
from plateau_core.rebuild import RebuildRefusedError, rebuild_manifest
from plateau_core.segment_file import write_segment
from tests.bridge_support import REPO
from tests.core.test_blooms import SEGMENTS, _write, request_id
from tests.core.test_manifest import race_opens
from tests.postgres_server import PostgresServer
from tests.support import batch, fill_segments


def test_openers_racing_on_a_new_database_migrate_it_once(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    for attempt in range(3):
        url = postgres.new_database()
        race_opens(tmp_path / f"d{attempt}", url, openers=6)
        manifest = Manifest(url)
        try:
            with manifest.engine.connect() as conn:
                rows = conn.execute(text("SELECT version FROM schema_version")).scalars().all()
            assert sorted(rows) == list(range(1, LATEST + 1))
        finally:
            manifest.close()


def test_rebuild_fills_an_empty_database_and_refuses_a_used_one(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first = postgres.new_database()
    with Store.open(data, manifest_url=first) as store:
        _write(store)
        before = [
            (s.start_offset, s.end_offset, s.record_count) for s in store.manifest.segments("logs")
        ]
        pruned = store.read("logs", where={"request_id": request_id(5)}).pruned
    with pytest.raises(RebuildRefusedError, match="already holds a manifest"):
        rebuild_manifest(data, first)
    second = postgres.new_database()
    report = rebuild_manifest(data, second)
    assert report.segments == SEGMENTS and report.quarantined == []
    with Store.open(data, manifest_url=second) as store:
        after = [
            (s.start_offset, s.end_offset, s.record_count) for s in store.manifest.segments("logs")
        ]
        assert after == before
        # Bloom filters come back from the footers: the needle prunes as before.
        needle = store.read("logs", where={"request_id": request_id(5)})
        assert needle.pruned == pruned
        assert needle.to_table().column("offset").to_pylist() == [5]


def test_an_older_manifest_is_upgraded_in_place(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.new_database()
    with Store.open(tmp_path, manifest_url=url) as store:
        _write(store)
        with store.manifest.engine.begin() as conn:
            # Back to a manifest of schema version 4: no statistics, no bloom filters.
            conn.execute(text("DROP TABLE segment_blooms"))
            conn.execute(text("DROP TABLE segment_columns"))
            conn.execute(text("DELETE FROM schema_version WHERE version >= 5"))
    with Store.open(tmp_path, manifest_url=url) as store:
        assert store.manifest.schema_version == LATEST
        result = store.read("logs", where={"request_id": request_id(60)})
        assert result.to_table().column("offset").to_pylist() == [60]
        assert result.pruned == 0  # recorded before the filters existed


def test_two_processes_share_the_manifest(postgres: PostgresServer, tmp_path: Path) -> None:
    """A writer in another process seals partition 1 while this one writes partition 0 and
    reads both: one database, no file lock between them but the partitions' own."""
    url = postgres.new_database()
    with Store.open(tmp_path, manifest_url=url) as store:
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys\n"
                "from plateau_core import RollPolicy, Store, WriterPolicy\n"
                "from tests.support import append_patiently, batch\n"
                "with Store.open(sys.argv[1], manifest_url=sys.argv[2]) as store:\n"
                "    w = store.writer(WriterPolicy(fsync=False))\n"
                "    w.acquire('t', 1, roll=RollPolicy(max_rows=100))\n"
                "    for start in range(0, 1000, 100):\n"
                "        append_patiently(w, 't', 1, batch(range(start, start + 100)))\n"
                "    w.flush()\n"
                "    w.close()\n",
                str(tmp_path),
                url,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        writer = store.writer(WriterPolicy(fsync=False))
        writer.acquire("t", 0)
        writer.append("t", 0, batch(range(500)))
        writer.flush()
        writer.close()
        assert other.returncode == 0, other.stderr[-2000:]
        by_partition = {
            p: sorted(store.read("t", partitions=[p]).to_table().column("offset").to_pylist())
            for p in (0, 1)
        }
        assert by_partition == {0: list(range(500)), 1: list(range(1000))}
        assert len(store.manifest.segments("t", partitions=[1])) == 10


def _wait_for_lock_wait(url: str) -> None:
    """Until some session of the database waits on a row lock (a blocked UPDATE)."""
    probe = create_engine(url)
    try:
        deadline = time.monotonic() + 30
        while True:
            with probe.connect() as conn:
                waiting = conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                ).scalar_one()
            if waiting:
                return
            assert time.monotonic() < deadline, "the UPDATE never waited on the row lock"
            time.sleep(0.01)
    finally:
        probe.dispose()


def test_a_copy_is_not_recorded_when_another_process_retires_one_of_its_segments(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """READ COMMITTED: a row another transaction moves on while mark_replicated waits for
    its lock is skipped by the UPDATE, and must not be counted as moved."""
    url = postgres.new_database()
    with Store.open(tmp_path, manifest_url=url) as store:
        fill_segments(store, 0, 2)
        first, second = store.manifest.segments("t")
        other = create_engine(url)
        try:
            with other.connect() as conn:
                retiring = conn.begin()
                conn.execute(
                    text("UPDATE segments SET state = 'deleting' WHERE id = :id"), {"id": first.id}
                )
                answer: list[list[int]] = []
                marking = threading.Thread(
                    target=lambda: answer.append(
                        store.manifest.mark_replicated([first.id, second.id], whole=True)
                    )
                )
                marking.start()
                _wait_for_lock_wait(url)
                retiring.commit()
                marking.join(timeout=30)
        finally:
            other.dispose()
        assert answer == [[]]
        states = {s.id: s.state for s in store.manifest.segments_by_id([first.id, second.id])}
        assert states == {first.id: SegmentState.DELETING, second.id: SegmentState.SEALED}
        assert store.spans("t")[0].replicated_offset == 0


def test_a_postgresql_url_without_a_driver_opens_with_the_installed_one(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """docs/configuration.md gives postgresql://user@host:port/db, and plateau[postgres]
    installs psycopg2, which SQLAlchemy 2.1 no longer picks for a URL without a driver."""
    url = postgres.new_database().replace("postgresql+psycopg2://", "postgresql://")
    with Store.open(tmp_path, manifest_url=url) as store:
        fill_segments(store, 0, 2)
    with Store.open(tmp_path, manifest_url=url) as store:
        assert store.read("t").to_table().num_rows == 20


def test_two_processes_sealing_a_new_schema_of_one_topic_both_land(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """Workers of one topic (serve --workers N) see a new schema at once: the one whose
    transaction commits second must not fail its seal on the schema the first recorded."""
    url = postgres.new_database()
    table = pa.Table.from_batches([batch([0, 1, 2])])
    _, stats = write_segment(tmp_path, table)
    with Store.open(tmp_path / "data", manifest_url=url) as store:
        other = create_engine(url)
        try:
            with other.connect() as conn:
                first = conn.begin()
                conn.execute(
                    text(
                        "INSERT INTO schemas (topic, fingerprint, arrow_schema, first_seen) "
                        "VALUES ('t', :fingerprint, :schema, 0)"
                    ),
                    {
                        "fingerprint": stats.schema_fingerprint,
                        "schema": table.schema.serialize().to_pybytes(),
                    },
                )
                outcome: list[bool | BaseException] = []

                def seal() -> None:
                    try:
                        outcome.append(
                            store.manifest.commit_segment("t", 1, stats, "b", table.schema)
                        )
                    except BaseException as exc:
                        outcome.append(exc)

                sealing = threading.Thread(target=seal)
                sealing.start()
                _wait_for_lock_wait(url)
                first.commit()
                sealing.join(timeout=30)
        finally:
            other.dispose()
        assert outcome == [True]
        assert store.manifest.watermark("t", 1) == 3
        assert list(store.manifest.schemas("t")) == [stats.schema_fingerprint]


def test_a_rebuild_refused_for_a_used_database_names_every_table_to_drop(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """Dropping the tables the refusal names empties the database for the rebuild: a table
    left behind (bloom filters, producers) would be taken up again by the new manifest."""
    data = tmp_path / "data"
    url = postgres.new_database()
    with Store.open(data, manifest_url=url) as store:
        _write(store)
    with pytest.raises(RebuildRefusedError, match="already holds a manifest") as refused:
        rebuild_manifest(data, url)
    named = re.search(r"drop plateau's tables \(([^)]*)\)", str(refused.value))
    assert named is not None
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for table in named.group(1).split(", "):
                conn.execute(text(f"DROP TABLE {table}"))
        with engine.connect() as conn:
            left = conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            ).scalars()
            assert list(left) == []
    finally:
        engine.dispose()
    report = rebuild_manifest(data, url)
    assert report.segments == SEGMENTS
    with Store.open(data, manifest_url=url) as store:
        needle = store.read("logs", where={"request_id": request_id(5)})
        assert needle.to_table().column("offset").to_pylist() == [5]


def test_a_rebuild_interrupted_on_postgresql_is_refused_then_run_again_into_the_same_database(
    postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    url = postgres.new_database()
    with Store.open(data, manifest_url=url) as store:
        _write(store)
    empty = postgres.new_database()
    commit = Manifest.commit_segment
    calls: list[int] = []

    def dies_after_two(self: Manifest, *args: object, **kwargs: object) -> object:
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return commit(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Manifest, "commit_segment", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        rebuild_manifest(data, empty)
    monkeypatch.setattr(Manifest, "commit_segment", commit)
    with pytest.raises(ManifestUnusableError, match="rebuild-manifest was interrupted"):
        Store.open(data, manifest_url=empty)
    report = rebuild_manifest(data, empty)
    assert report.segments == SEGMENTS
    with Store.open(data, manifest_url=empty) as store:
        assert len(store.manifest.segments("logs")) == SEGMENTS
        needle = store.read("logs", where={"request_id": request_id(5)})
        assert needle.to_table().column("offset").to_pylist() == [5]


def test_a_rebuild_interrupted_into_one_database_does_not_drop_another_one(
    postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker an interrupted rebuild leaves names its database: run again with the
    store pointed at another one (a manifest restored from a copy), the rebuild refuses that
    one as it refuses any used database, instead of dropping its tables."""
    data = tmp_path / "data"
    restored = postgres.new_database()
    with Store.open(data, manifest_url=restored) as store:
        _write(store)
    empty = postgres.new_database()
    commit = Manifest.commit_segment

    def dies(self: Manifest, *args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(Manifest, "commit_segment", dies)
    with pytest.raises(KeyboardInterrupt):
        rebuild_manifest(data, empty)
    monkeypatch.setattr(Manifest, "commit_segment", commit)
    with pytest.raises(RebuildRefusedError, match="already holds a manifest"):
        rebuild_manifest(data, restored)
    manifest = Manifest(restored, upgrade=False)
    try:
        assert len(manifest.segments("logs")) == SEGMENTS
    finally:
        manifest.close()
    # Into the database it was interrupted in, it runs again.
    assert rebuild_manifest(data, empty).segments == SEGMENTS
