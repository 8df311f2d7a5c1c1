"""Versioned manifest schema migrations, applied in order, each in its own transaction.

A migration is never edited once released: a change to the tables is a new entry at the
end, creating or altering only what it names.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Index,
    MetaData,
    Table,
    UniqueConstraint,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy import column as sql_column
from sqlalchemy import table as sql_table

from plateau_core.errors import PlateauError
from plateau_core.manifest.models import Base, SchemaVersion, StoreIdentityRow


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


_V1_TABLES = ("schema_version", "partitions", "segments", "schemas")


def _v1_create_tables(conn: Connection) -> None:
    tables = [Base.metadata.tables[name] for name in _V1_TABLES]
    Base.metadata.create_all(conn, tables=tables)


def _v2_gaps(conn: Connection) -> None:
    Base.metadata.create_all(conn, tables=[Base.metadata.tables["gaps"]])


def _v3_checksums(conn: Connection) -> None:
    # v1 creates tables from the current models, so a new manifest already has the column.
    columns = {c["name"] for c in inspect(conn).get_columns("segments")}
    if "checksums" not in columns:
        conn.exec_driver_sql("ALTER TABLE segments ADD COLUMN checksums TEXT")


def _v4_produce(conn: Connection) -> None:
    tables = [Base.metadata.tables[n] for n in ("produced_topics", "producers", "counters")]
    Base.metadata.create_all(conn, tables=tables)


def _v5_column_stats(conn: Connection) -> None:
    Base.metadata.create_all(conn, tables=[Base.metadata.tables["segment_columns"]])


def _v6_blooms(conn: Connection) -> None:
    Base.metadata.create_all(conn, tables=[Base.metadata.tables["segment_blooms"]])


def _v7_segment_ids_never_reused(conn: Connection) -> None:
    """Rebuild SQLite's segments table with AUTOINCREMENT, rows and ids kept.

    Before, the id was a plain rowid alias: once the row holding the highest id was
    removed, the next segment got that id again, and a replication run, consolidation or
    verify that had listed the removed one acted on the new one. Copying the rows in with
    their ids starts sqlite_sequence at the highest id now present. A manifest created by v1
    from the current models has AUTOINCREMENT already; PostgreSQL's sequences never reuse.
    """
    if conn.dialect.name != "sqlite":
        return
    created = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'segments'"
    ).scalar_one()
    if "AUTOINCREMENT" in created.upper():
        return
    model = Base.metadata.tables["segments"]
    # The table as it stands, not as the models will have it: a column a later migration
    # adds must not exist yet when that migration runs (nor be selected from this one).
    present = {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(segments)")}
    names = [column.name for column in model.columns if column.name in present]
    table = Table(
        "segments",
        MetaData(),
        *(
            Column(
                name,
                model.c[name].type,
                nullable=model.c[name].nullable,
                primary_key=model.c[name].primary_key,
            )
            for name in names
        ),
        sqlite_autoincrement=True,
    )
    for unique in model.constraints:
        if isinstance(unique, UniqueConstraint) and set(unique.columns.keys()) <= present:
            table.append_constraint(UniqueConstraint(*unique.columns.keys(), name=unique.name))
    for index in model.indexes:
        if {column.name for column in index.columns} <= present:
            Index(index.name, *(table.c[column.name] for column in index.columns))
    old_indexes = conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'segments' "
        "AND sql IS NOT NULL"
    ).scalars()
    for name in old_indexes.all():
        conn.exec_driver_sql(f'DROP INDEX "{name}"')  # the new table's take their names
    conn.exec_driver_sql('ALTER TABLE segments RENAME TO "segments_before_v7"')
    table.create(conn)
    before = sql_table("segments_before_v7", *(sql_column(name) for name in names))
    conn.execute(insert(table).from_select(names, select(*before.columns)))
    conn.exec_driver_sql("DROP TABLE segments_before_v7")


def _v8_source_topics(conn: Connection) -> None:
    Base.metadata.create_all(conn, tables=[Base.metadata.tables["source_topics"]])


def _v9_store_id(conn: Connection) -> None:
    """A random id for the store, new or existing: an existing one's streams adopt it at
    their next batch (their offsets held none)."""
    Base.metadata.create_all(conn, tables=[Base.metadata.tables["store_identity"]])
    if conn.execute(select(StoreIdentityRow.store_id)).first() is None:
        conn.execute(
            insert(StoreIdentityRow).values(
                store_id=str(uuid.uuid4()), created_at=int(time.time() * 1000)
            )
        )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "partitions, segments, schemas", _v1_create_tables),
    Migration(2, "gaps: offsets Kafka no longer had", _v2_gaps),
    Migration(3, "segments.checksums: CRC32s of each file's regions", _v3_checksums),
    Migration(4, "produced topics, idempotent producers, counters", _v4_produce),
    Migration(5, "segment_columns: promoted per-column statistics", _v5_column_stats),
    Migration(6, "segment_blooms: bloom filters of indexed columns", _v6_blooms),
    Migration(
        7, "segments.id: AUTOINCREMENT on SQLite, never reused", _v7_segment_ids_never_reused
    ),
    Migration(8, "source_topics: the Kafka topic id each partition comes from", _v8_source_topics),
    Migration(9, "store_identity: the store's random id", _v9_store_id),
)
STORE_ID_VERSION = 9
LATEST = MIGRATIONS[-1].version


# Any constant: the key of the PostgreSQL advisory lock that serializes migrations.
_MIGRATION_LOCK = 0x706C6174  # "plat"


def _serialize(conn: Connection) -> None:
    """Make openers racing on a new manifest migrate it one after another. SQLite's
    BEGIN IMMEDIATE already does; PostgreSQL's transactions do not lock tables about to be
    created, so a transaction-scoped advisory lock does."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})


def current_version(engine: Engine) -> int:
    with engine.connect() as conn:
        return _version(conn)


def tables_present(engine: Engine) -> list[str]:
    """Which of the manifest's tables the database holds, whatever its schema version says
    (a database emptied by hand may keep some)."""
    with engine.connect() as conn:
        existing = set(inspect(conn).get_table_names())
    return sorted(name for name in Base.metadata.tables if name in existing)


def _version(conn: Connection) -> int:
    if not inspect(conn).has_table(SchemaVersion.__tablename__):
        return 0
    versions = conn.execute(select(SchemaVersion.version)).scalars().all()
    return max(versions, default=0)


def migrate(engine: Engine, read_engine: Engine | None = None) -> int:
    """Bring the manifest to the latest version; returns the version it is at.

    All pending migrations run in one write transaction that first re-reads the version,
    so processes opening a new store at the same moment migrate it once.
    """
    version = current_version(read_engine or engine)
    if version == LATEST:
        return version
    with engine.begin() as conn:
        _serialize(conn)
        version = _version(conn)
        if version > LATEST:
            raise PlateauError(
                f"the manifest is at schema version {version}, newer than this plateau "
                f"understands ({LATEST}); upgrade plateau"
            )
        for migration in MIGRATIONS:
            if migration.version <= version:
                continue
            if migration.version == 1:
                Base.metadata.tables[SchemaVersion.__tablename__].create(conn, checkfirst=True)
            migration.apply(conn)
            conn.execute(
                insert(SchemaVersion).values(
                    version=migration.version,
                    description=migration.description,
                    applied_at=int(time.time() * 1000),
                )
            )
            version = migration.version
    return version
