"""A real PostgreSQL server for the tests: pgserver runs the PostgreSQL binaries its wheel
ships, on a Unix socket in a folder of the test session, so the manifest and the Iceberg SQL
catalog are exercised on PostgreSQL as well as on SQLite. Each test gets a database of its
own."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_numbers = itertools.count()


class PostgresServer:
    def __init__(self, pgdata: Path) -> None:
        import pgserver  # noqa: PLC0415 (its import probes the machine; only when asked for)

        self._server: Any = pgserver.get_server(pgdata, cleanup_mode="stop")
        self.socket_dir = str(pgdata)

    def url(self, database: str, driver: str = "psycopg2") -> str:
        return f"postgresql+{driver}://postgres@/{database}?host={self.socket_dir}"

    def new_database(self, prefix: str = "plateau") -> str:
        """A fresh empty database; its SQLAlchemy URL."""
        name = f"{prefix}_{next(_numbers)}"
        self._server.psql(f"CREATE DATABASE {name};")
        return self.url(name)

    def stop(self) -> None:
        self._server.cleanup()


@contextmanager
def postgres_server(pgdata: Path) -> Iterator[PostgresServer]:
    server = PostgresServer(pgdata)
    try:
        yield server
    finally:
        server.stop()
