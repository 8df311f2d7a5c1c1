"""The manifest database: migrations, durability settings, permissions, opening by URL."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from plateau_core import PlateauError, Store, WriterPolicy
from plateau_core.manifest import Manifest, sqlite_url
from plateau_core.manifest.migrations import LATEST, current_version
from tests.support import batch


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
    assert "ter2" not in str(raised.value)
    assert raised.value.__cause__ is None or "hunter2" not in str(raised.value.__cause__)
