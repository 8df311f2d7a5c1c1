from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from plateau_core import Store
from tests.postgres_server import PostgresServer


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A new store; its manifest on SQLite (the default) or on PostgreSQL."""
    url = None
    if request.param == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres")
        url = server.new_database()
    opened = Store.open(tmp_path / "data", manifest_url=url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def empty_manifest(request: pytest.FixtureRequest) -> Callable[[Store], str | None]:
    """For a closed store, an empty manifest of the same kind to rebuild into: its SQLite
    files removed (None: the default place), or a new PostgreSQL database."""

    def make(store: Store) -> str | None:
        if store.manifest.is_sqlite:
            for name in ("manifest.db", "manifest.db-wal", "manifest.db-shm"):
                (store.data_dir / name).unlink(missing_ok=True)
            return None
        server: PostgresServer = request.getfixturevalue("postgres")
        return server.new_database()

    return make
