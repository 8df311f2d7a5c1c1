"""The manifest database: migrations, durability settings, permissions, opening by URL."""

from __future__ import annotations

import stat
import threading
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Column, Index, Integer, text

from plateau_core import PlateauError, SegmentState, Store, WriterPolicy
from plateau_core.errors import InvalidInputError
from plateau_core.manifest import Manifest, migrations, sqlite_url
from plateau_core.manifest.migrations import LATEST, current_version
from plateau_core.manifest.models import SegmentRow
from plateau_core.names import STORE_ID_FILE
from tests.support import batch, fill_segments


def test_fresh_manifest_is_migrated_and_durable(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    try:
        assert store.manifest.schema_version == LATEST
        with store.manifest.engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
    finally:
        store.close()


def test_reopening_does_not_migrate_again(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    manifest = Manifest(sqlite_url(tmp_path / "manifest.db"))
    try:
        with manifest.engine.connect() as conn:
            rows = conn.execute(text("SELECT version FROM schema_version")).scalars().all()
        assert rows == list(range(1, LATEST + 1))
        assert current_version(manifest.engine) == LATEST
    finally:
        manifest.close()


def test_a_newer_manifest_is_refused(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    manifest = Manifest(sqlite_url(tmp_path / "manifest.db"))
    with manifest.engine.begin() as conn:
        conn.execute(text("INSERT INTO schema_version VALUES (:v, 'future', 0)"), {"v": LATEST + 1})
    manifest.close()
    with pytest.raises(PlateauError, match="newer than this plateau understands"):
        Store.open(tmp_path)


def test_store_files_are_private(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    writer = store.writer(WriterPolicy())
    writer.acquire("t", 0)
    writer.append("t", 0, batch([0, 1]))
    writer.close()
    try:
        assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o700
        assert stat.S_IMODE((tmp_path / "d" / "manifest.db").stat().st_mode) == 0o600
    finally:
        store.close()


def test_open_by_manifest_url_finds_the_data(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    writer = store.writer(WriterPolicy(fsync=False))
    writer.acquire("t", 0)
    writer.append("t", 0, batch([0, 1, 2]))
    writer.close()
    store.close()
    by_url = Store.open(manifest_url=sqlite_url(tmp_path / "manifest.db"))
    try:
        assert by_url.data_dir == tmp_path.resolve()
        assert by_url.read("t").to_table().num_rows == 3
        assert by_url.topics() == ["t"]
    finally:
        by_url.close()
    with pytest.raises(PlateauError, match="give the data folder too"):
        Store.open(manifest_url="postgresql://localhost/plateau")


def race_opens(data: Path, url: str | None, openers: int = 8) -> None:
    """`openers` threads open the same new store at the same instant; fails on any error."""
    barrier = threading.Barrier(openers)
    errors: list[BaseException] = []

    def open_store() -> None:
        barrier.wait()
        try:
            Store.open(data, manifest_url=url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(openers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "an opener never returned"
    assert not errors, errors[0]


def test_concurrent_opens_of_a_new_store_migrate_once(tmp_path: Path) -> None:
    for attempt in range(5):
        data = tmp_path / f"d{attempt}"
        race_opens(data, None)
        manifest = Manifest(sqlite_url(data / "manifest.db"))
        try:
            with manifest.engine.connect() as conn:
                rows = conn.execute(text("SELECT version FROM schema_version")).scalars().all()
                mode = conn.execute(text("PRAGMA journal_mode")).scalar()
            assert sorted(rows) == list(range(1, LATEST + 1))
            assert mode == "wal"
        finally:
            manifest.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqlite:///{tmp}/missing/manifest.db", "unable to open database file"),
        ("postgresql+psycopg2://plateau:hunter2@127.0.0.1:1/plateau", "127.0.0.1"),
        ("postgresql+pg8000://plateau:hunter2@127.0.0.1/plateau", r"plateau\[postgres\]"),
        ("plateau.db", "not a database URL"),
        ("postgresql+psycopg2 ://plateau:hunter2@db/plateau", r"plateau:\*\*\*@db"),
        ("postgresql:/plateau:hunter2@db/plateau", r"postgresql:\*\*\*@db"),
        ("postgresql//plateau:hunter2@db/plateau", r"plateau:\*\*\*@db"),
        ("postgresql+psycopg2 ://plateau:hun/ter2@db/plateau", r"plateau:\*\*\*@db"),
    ],
    ids=[
        "sqlite-folder-missing",
        "postgresql-unreachable",
        "driver-not-installed",
        "not-a-url",
        "not-a-url-with-a-password",
        "one-slash-after-the-scheme",
        "no-colon-after-the-scheme",
        "not-a-url-with-a-slash-in-the-password",
    ],
)
def test_a_manifest_that_cannot_be_opened_is_named(tmp_path: Path, url: str, says: str) -> None:
    """A PlateauError (which the CLI prints as one line) naming the manifest, without its
    password, rather than a driver's traceback."""
    url = url.format(tmp=tmp_path)
    with pytest.raises(PlateauError, match=says) as raised:
        Store.open(tmp_path / "data", manifest_url=url)
    assert "manifest" in str(raised.value)
    assert "hunter2" not in str(raised.value)


def test_a_manifest_url_alone_that_does_not_parse_is_named() -> None:
    """Given only a manifest URL, Store.open parses it itself (for the data folder): a
    driver's ArgumentError came through instead of an error naming the URL."""
    with pytest.raises(InvalidInputError, match="not a database URL") as raised:
        Store.open(manifest_url="postgresql:/plateau:hunter2@db/plateau")
    assert "hunter2" not in str(raised.value)
    assert "ter2" not in str(raised.value)
    assert raised.value.__cause__ is None or "hunter2" not in str(raised.value.__cause__)


def _remove_newest(store: Store) -> int:
    """Retention's two steps for the newest segment of the store: retired, then its row
    removed (its grace over). Returns its id."""
    newest = max(s.id for s in store.manifest.segments(states=tuple(SegmentState)))
    assert store.manifest.mark_deleting([newest], at=0) == [newest]
    assert store.manifest.remove([newest]) == 1
    return newest


def test_the_id_of_a_removed_segment_is_never_given_to_another(store: Store) -> None:
    """A replication run, a consolidation or verify holds ids across transactions and acts
    on them later: an id handed out again would name a segment they never looked at."""
    fill_segments(store, 0, 3)
    removed = _remove_newest(store)
    fill_segments(store, 1, 1)
    [newer] = store.manifest.segments("t", partitions=[1])
    assert newer.id > removed


# What schema versions 1 to 6 created on SQLite: the id a rowid alias without AUTOINCREMENT,
# which SQLite hands out again once the row holding the highest one is deleted.
_V6_SEGMENTS = """CREATE TABLE segments (
    id INTEGER NOT NULL, topic VARCHAR(249) NOT NULL, partition INTEGER NOT NULL,
    start_offset BIGINT NOT NULL, end_offset BIGINT NOT NULL, record_count BIGINT NOT NULL,
    time_min BIGINT NOT NULL, time_max BIGINT NOT NULL, size_bytes BIGINT NOT NULL,
    path VARCHAR(400) NOT NULL, schema_fingerprint VARCHAR(32) NOT NULL,
    state VARCHAR(16) NOT NULL, created_at BIGINT NOT NULL, replicated_at BIGINT,
    deleting_at BIGINT, problem TEXT, checksums TEXT, PRIMARY KEY (id),
    CONSTRAINT uq_segment_start UNIQUE (topic, partition, start_offset))"""


def _as_version_6(data: Path) -> None:
    """Make the store's manifest what schema version 6 left: its segments table as v6
    created it (rows kept), and no later version recorded."""
    manifest = Manifest(sqlite_url(data / "manifest.db"))
    try:
        with manifest.engine.begin() as conn:
            columns = ", ".join(f'"{c.name}"' for c in SegmentRow.__table__.columns)
            conn.execute(text("CREATE TEMPORARY TABLE kept AS SELECT * FROM segments"))
            conn.execute(text("DROP TABLE segments"))
            conn.execute(text(_V6_SEGMENTS))
            conn.execute(text(f"INSERT INTO segments ({columns}) SELECT {columns} FROM kept"))
            for index in SegmentRow.__table__.indexes:
                index.create(conn)
            conn.execute(text("DELETE FROM schema_version WHERE version > 6"))
            if conn.execute(
                text("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'")
            ).first():
                conn.execute(text("DELETE FROM sqlite_sequence WHERE name = 'segments'"))
    finally:
        manifest.close()


def test_an_existing_sqlite_manifest_stops_reusing_segment_ids(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Store.open(data) as store:
        fill_segments(store, 0, 3)
        fill_segments(store, 1, 2)
        store.manifest.mark_replicated([s.id for s in store.manifest.segments("t", partitions=[1])])
        before = store.manifest.segments("t", states=tuple(SegmentState))
        columns = store.manifest.schemas("t").popitem()[1].names
        stats = store.manifest.column_stats("t", columns)
        assert len(stats) == len(before)
        created = _segments_sql(store)
    _as_version_6(data)
    with Store.open(data) as store:
        assert store.manifest.schema_version == LATEST
        # The table as a new manifest has it, and its rows, ids, states and statistics kept.
        assert _segments_sql(store) == created
        assert store.manifest.segments("t", states=tuple(SegmentState)) == before
        assert store.manifest.column_stats("t", columns) == stats
        removed = _remove_newest(store)
        fill_segments(store, 2, 1)
        [newer] = store.manifest.segments("t", partitions=[2])
        assert newer.id > removed
        assert store.read("t", partitions=[0]).to_table().num_rows == 30


def test_the_id_migration_keeps_the_columns_the_table_has_when_the_models_grew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 7 rebuilt the table from today's models: once a later migration adds a
    column (and an index on it) to segments, a v6 manifest failed to upgrade, selecting a
    column its table lacks, or took the column before that migration could add it."""
    data = tmp_path / "data"
    with Store.open(data) as store:
        fill_segments(store, 0, 2)
        before = store.manifest.segments("t", states=tuple(SegmentState))
    _as_version_6(data)
    model = SegmentRow.__table__
    later = Column("added_later", Integer, nullable=True)
    model.append_column(later)
    later_index = Index("ix_segments_added_later", later)
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:7])
    monkeypatch.setattr(migrations, "LATEST", 7)
    try:
        upgraded = Manifest(sqlite_url(data / "manifest.db"))
        try:
            with upgraded.engine.connect() as conn:
                names = {row[1] for row in conn.execute(text("PRAGMA table_info(segments)"))}
                indexes = {row[1] for row in conn.execute(text("PRAGMA index_list(segments)"))}
        finally:
            upgraded.close()
    finally:
        model.indexes.discard(later_index)
        model._columns.remove(later)
    assert "added_later" not in names
    assert "ix_segments_added_later" not in indexes
    assert {"ix_segments_span", "ix_segments_time", "ix_segments_state"} <= indexes
    with Store.open(data) as store:
        assert store.manifest.segments("t", states=tuple(SegmentState)) == before


def _segments_sql(store: Store) -> list[str]:
    """The statements that create the segments table and its indexes."""
    with store.manifest.engine.connect() as conn:
        found = conn.execute(
            text("SELECT sql FROM sqlite_master WHERE tbl_name = 'segments' AND sql IS NOT NULL")
        )
        return sorted(row[0] for row in found)


def test_a_manifest_from_before_source_topic_ids_gains_them(store: Store) -> None:
    """Upgraded from schema version 7, a partition has no source topic recorded; one is
    recorded, and replaced by the next."""
    fill_segments(store, 0, 1)
    with store.manifest.engine.begin() as conn:
        conn.execute(text("DROP TABLE source_topics"))
        conn.execute(text("DELETE FROM schema_version WHERE version >= 8"))
    upgraded = Manifest(store.manifest.url)
    try:
        assert upgraded.schema_version == LATEST
        assert upgraded.source_topic("t", 0) is None
        upgraded.record_source_topic("t", 0, "events", "MrmuyUDSRD-Xy-2jBX5CJA")
        upgraded.record_source_topic("t", 0, "events", "pB3JlcxQRbS9cUZ8mDukVQ")
        assert upgraded.source_topic("t", 0) == ("events", "pB3JlcxQRbS9cUZ8mDukVQ")
        assert upgraded.source_topic("t", 1) is None
        assert store.read("t", partitions=[0]).to_table().num_rows == 10
    finally:
        upgraded.close()


def test_a_manifest_from_before_store_ids_gets_one_and_the_folder_a_copy(store: Store) -> None:
    """Upgraded from schema version 8, the store gets an id at its next open, kept from then
    on, and the copy rebuild-manifest reads is written beside the segment files."""
    fill_segments(store, 0, 1)
    with store.manifest.engine.begin() as conn:
        conn.execute(text("DROP TABLE store_identity"))
        conn.execute(text("DELETE FROM schema_version WHERE version >= 9"))
    (store.data_dir / STORE_ID_FILE).unlink()
    with Store.open(store.data_dir, manifest_url=store.manifest.url) as upgraded:
        assert upgraded.manifest.schema_version == LATEST
        given = upgraded.manifest.store_id()
        assert str(uuid.UUID(given)) == given
        assert (store.data_dir / STORE_ID_FILE).read_text() == f"{given}\n"
    with Store.open(store.data_dir, manifest_url=store.manifest.url) as again:
        assert again.manifest.store_id() == given


def test_a_manifest_put_back_from_before_store_ids_keeps_the_store_id(store: Store) -> None:
    """Rolled back after an upgrade by putting back the manifest copied before it (schema
    version 8), then upgraded again: the store keeps the id its streams' checkpoints took
    meanwhile, from the copy in the data folder, rather than getting a new one that refuses
    them as another store's."""
    fill_segments(store, 0, 1)
    given = store.manifest.store_id()
    with store.manifest.engine.begin() as conn:
        conn.execute(text("DROP TABLE store_identity"))
        conn.execute(text("DELETE FROM schema_version WHERE version >= 9"))
    with Store.open(store.data_dir, manifest_url=store.manifest.url) as upgraded:
        assert upgraded.manifest.schema_version == LATEST
        assert upgraded.manifest.store_id() == given
    assert (store.data_dir / STORE_ID_FILE).read_text() == f"{given}\n"


def test_a_manifest_and_a_data_folder_of_two_stores_are_refused(store: Store) -> None:
    """Opened together, one store's manifest would take the other's segment files for
    orphans; the error names both ids."""
    fill_segments(store, 0, 1)
    other = str(uuid.uuid4())
    (store.data_dir / STORE_ID_FILE).write_text(f"{other}\n")
    with pytest.raises(PlateauError, match="belong to different stores") as raised:
        Store.open(store.data_dir, manifest_url=store.manifest.url)
    assert other in str(raised.value) and store.manifest.store_id() in str(raised.value)


def test_a_store_created_again_in_a_folder_gets_a_new_id(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Store.open(data) as first:
        old = first.manifest.store_id()
    for name in ("manifest.db", "manifest.db-wal", "manifest.db-shm"):
        (data / name).unlink(missing_ok=True)
    with Store.open(data) as second:
        new = second.manifest.store_id()
    assert new != old
    assert (data / STORE_ID_FILE).read_text() == f"{new}\n"
