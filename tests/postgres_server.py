"""A real PostgreSQL server for the tests, so the manifest and the Iceberg SQL catalog are
exercised on PostgreSQL as well as on SQLite. pgserver ships the PostgreSQL binaries in its
wheel and prepares a data folder (initdb, and a system user of its own when the tests run as
root, which PostgreSQL refuses to run as); the server is then started on a free loopback
port, as Spark's JDBC reader needs one. Each test gets a database of its own."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2

from bridge.local_kafka import free_port

_numbers = itertools.count()


class PostgresServer:
    def __init__(self, pgdata: Path) -> None:
        import pgserver  # noqa: PLC0415 (its import probes the machine; only when asked for)

        # Prepares the folder and starts a server on a Unix socket only; it is stopped and
        # started again below with a TCP port.
        prepared: Any = pgserver.get_server(pgdata, cleanup_mode="stop")
        self._user: str | None = prepared.system_user
        prepared.cleanup()
        self._pg_ctl: Any = pgserver.pg_ctl
        self._pgdata = pgdata
        self.port = free_port()
        self.start()

    def start(self) -> None:
        """Start the server (again: same port, same data)."""
        self._pg_ctl(
            [
                "-w",
                "-o",
                f"-h 127.0.0.1 -p {self.port} -k {self._pgdata}",
                "-l",
                str(self._pgdata / "server.log"),
                "start",
            ],
            pgdata=self._pgdata,
            user=self._user,
            timeout=60,
        )

    def url(self, database: str, driver: str = "psycopg2") -> str:
        return f"postgresql+{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self, prefix: str = "plateau") -> str:
        """A fresh empty database; its SQLAlchemy URL."""
        name = f"{prefix}_{next(_numbers)}"
        conn = psycopg2.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres"
        )
        try:
            conn.autocommit = True  # CREATE DATABASE runs outside a transaction
            with conn.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE {name}")
        finally:
            conn.close()
        return self.url(name)

    def stop(self) -> None:
        """Stop the server; its open connections are closed (fast shutdown)."""
        self._pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self._pgdata, user=self._user, timeout=60)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A server in a data folder of its own, not under pytest's temporary root: the server
    runs as a user of its own, and every pytest session started meanwhile (another test run
    on the machine) takes that root's permissions back to its owner only, which stopped the
    server mid-run."""
    folder = Path(tempfile.mkdtemp(prefix="plateau-tests-pg-"))
    try:
        (folder / "pg").mkdir()
        server = PostgresServer(folder / "pg")
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
