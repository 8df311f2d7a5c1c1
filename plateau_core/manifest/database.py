"""The manifest's database: engines (SQLite in WAL mode, or any SQLAlchemy URL), migrations,
integrity, the files it occupies, and one-writer-at-a-time transactions."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from plateau_core.manifest.bloom_cache import BloomCache
from plateau_core.manifest.engine import DEFAULT_BUSY_TIMEOUT_S, server_engine, sqlite_engine
from plateau_core.manifest.migrations import current_version, migrate


class ManifestDatabase:
    """The manifest's database: its engines, migrations, integrity and files, and the short
    transactions the Manifest's methods run in."""

    def __init__(
        self, url: str, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S, upgrade: bool = True
    ) -> None:
        """Open the manifest at `url`; `upgrade=False` leaves migrations to `upgrade()`, so
        the caller can look at `version_at_open` before a new manifest is created."""
        self.url = url
        self.bloom_cache = BloomCache()
        self._sqlite = make_url(url).get_backend_name() == "sqlite"
        self._write_lock = threading.Lock()
        if self._sqlite:
            self.engine = sqlite_engine(url, busy_timeout_s, immediate=True)
            self._read_engine = sqlite_engine(url, busy_timeout_s, immediate=False)
        else:
            self.engine = server_engine(url)
            self._read_engine = self.engine
        # 0 means the database held no manifest: a new store, or a lost manifest.
        self.version_at_open = current_version(self._read_engine)
        self.schema_version = self.version_at_open
        if upgrade:
            self.upgrade()

    def upgrade(self) -> int:
        """Apply pending migrations; returns the schema version."""
        self.schema_version = migrate(self.engine, self._read_engine)
        return self.schema_version

    @property
    def is_sqlite(self) -> bool:
        """Whether the manifest is an SQLite file (not on a database server)."""
        return self._sqlite

    def integrity_check(self) -> list[str]:
        """SQLite's quick_check of the database file: [] when sound, else what it found.

        Other databases check their own storage, so they always answer []."""
        if not self._sqlite:
            return []
        with self._read_engine.connect() as conn:
            rows = [str(r[0]) for r in conn.execute(text("PRAGMA quick_check"))]
        return [] if rows == ["ok"] else rows

    def close(self) -> None:
        """Close the database connections."""
        self.engine.dispose()
        self._read_engine.dispose()

    def database_files(self) -> list[Path]:
        """The files the manifest occupies on local disk (for the store's footprint)."""
        database = make_url(self.url).database
        if not self._sqlite or not database or database == ":memory:":
            return []
        base = Path(database)
        return [p for p in (base, Path(f"{base}-wal"), Path(f"{base}-shm")) if p.exists()]

    def database_bytes(self) -> int:
        """Bytes of `database_files`: the manifest's part of the store's footprint."""
        return sum(p.stat().st_size for p in self.database_files())

    @contextmanager
    def _write(self) -> Iterator[Session]:
        # One writer at a time inside this process; other processes wait on SQLite's lock.
        with self._write_lock, Session(self.engine) as session, session.begin():
            yield session

    def _read(self) -> Session:
        return Session(self._read_engine)
