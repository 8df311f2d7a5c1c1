"""SQLAlchemy engines for the manifest: SQLite in WAL mode with durable commits, or any
other database by URL."""

from __future__ import annotations

import sqlite3
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import NoSuchModuleError

from plateau_core.errors import PlateauError

DEFAULT_BUSY_TIMEOUT_S = 30.0
WAL_SIZE_LIMIT = 4 * 1024 * 1024


def sqlite_engine(url: str, busy_timeout_s: float, *, immediate: bool) -> Engine:
    connect_args = {"timeout": busy_timeout_s, "check_same_thread": False}
    engine = create_engine(url, connect_args=connect_args)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin hook below decide how transactions start.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        enable_wal(cursor, busy_timeout_s)
        # FULL: the commit that precedes a Kafka offset commit must survive power loss.
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        # The WAL counts towards the store's fixed footprint: truncate it after checkpoints.
        cursor.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # IMMEDIATE takes the write lock up front, so a read-then-write transaction waits
        # for another process instead of failing with "database is locked" on upgrade.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def server_engine(url: str) -> Engine:
    """An engine for a manifest on a database server (PostgreSQL), by SQLAlchemy URL."""
    parsed = with_installed_driver(make_url(url))
    try:
        return create_engine(parsed, pool_pre_ping=True)
    except (NoSuchModuleError, ImportError) as exc:
        raise PlateauError(
            f"the manifest URL {parsed.render_as_string(hide_password=True)} needs a "
            f"database driver that is not installed ({exc}); for PostgreSQL, "
            "pip install 'plateau[postgres]'"
        ) from exc


def with_installed_driver(url: URL) -> URL:
    """postgresql://... with the driver plateau[postgres] installs (psycopg2) when
    SQLAlchemy's default one for it (psycopg, from SQLAlchemy 2.1) is not installed."""
    if url.drivername != "postgresql":
        return url
    if find_spec("psycopg") is None and find_spec("psycopg2") is not None:
        return url.set(drivername="postgresql+psycopg2")
    return url


def enable_wal(cursor: Any, timeout_s: float) -> None:
    """WAL lets readers run beside the writer. Switching a new database to it needs an
    exclusive lock, which another process opening the store may hold for a moment."""
    if cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of an SQLite database file."""
    return f"sqlite:///{path}"
