"""The steps of the seal commit, each run inside the manifest's write transaction.

Manifest.commit_seal runs record_partition for each partition, which takes them in order:
is this seal recorded already, then per segment move the watermark (compare-and-swap), add
the segment row, remember the schema; then move the watermark over offsets that landed
nowhere, and record the idempotent producers' batches. They are SQLAlchemy Core
statements on the transaction's connection: the seal commit runs for every segment, and the
ORM's bookkeeping cost more than the statements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text

from plateau_core.errors import ManifestConflictError
from plateau_core.manifest import produced
from plateau_core.manifest.models import SegmentState
from plateau_core.manifest.promoted import recordable
from plateau_core.manifest.records import PartitionCommit, SegmentFile
from plateau_core.segment_stats import SegmentStats

if TYPE_CHECKING:
    import pyarrow as pa


# Built once: the seal commit runs for every segment, and composing SQLAlchemy statements
# cost several times more than SQLite running them. Plain SQL with named parameters, quoted
# identifiers where a name is a keyword somewhere (partition): the same text runs on SQLite
# and PostgreSQL.
_SEGMENT_AT = text(
    'SELECT end_offset, record_count FROM segments WHERE topic = :topic AND "partition" = '
    ":partition AND start_offset = :start_offset"
)
_WATERMARK = text(
    'SELECT next_offset FROM partitions WHERE topic = :topic AND "partition" = :partition'
)
_NEW_PARTITION = text(
    'INSERT INTO partitions (topic, "partition", next_offset, replicated_offset, updated_at) '
    "VALUES (:topic, :partition, :next_offset, 0, :stamp)"
)
_MOVE_WATERMARK = text(
    "UPDATE partitions SET next_offset = :next_offset, updated_at = :stamp "
    'WHERE topic = :topic AND "partition" = :partition AND next_offset = :current'
)
_NEW_SEGMENT = text(
    'INSERT INTO segments (topic, "partition", start_offset, end_offset, record_count, '
    "time_min, time_max, size_bytes, path, schema_fingerprint, state, created_at, checksums) "
    "VALUES (:topic, :partition, :start_offset, :end_offset, :record_count, :time_min, "
    ":time_max, :size_bytes, :path, :schema_fingerprint, :state, :created_at, :checksums) "
    # RETURNING: the new row's id in the same round trip (SQLite 3.35+ and PostgreSQL).
    "RETURNING id"
)
_NEW_COLUMN = text(
    "INSERT INTO segment_columns (segment_id, column_name, kind, null_count, min_value, "
    "max_value) VALUES (:segment_id, :column_name, :kind, :null_count, :min_value, :max_value)"
)
_NEW_BLOOM = text(
    "INSERT INTO segment_blooms (segment_id, column_name, kind, hash_count, bits) "
    "VALUES (:segment_id, :column_name, :kind, :hash_count, :bits)"
)
_SCHEMA_KNOWN = text("SELECT 1 FROM schemas WHERE topic = :topic AND fingerprint = :fingerprint")
# ON CONFLICT DO NOTHING (SQLite 3.24+, PostgreSQL): processes sealing partitions of one
# topic record its new schema at once, and on PostgreSQL the SELECT before does not see the
# other's uncommitted row; the second insert then waits for it and does nothing, where a
# plain INSERT failed the second seal on the primary key.
_NEW_SCHEMA = text(
    "INSERT INTO schemas (topic, fingerprint, arrow_schema, first_seen) "
    "VALUES (:topic, :fingerprint, :arrow_schema, :first_seen) "
    "ON CONFLICT (topic, fingerprint) DO NOTHING"
)


def record_partition(conn: Connection, commit: PartitionCommit, stamp: int) -> bool:
    """Record one partition's seal; False when it was recorded already (its first segment
    is there: a retry after an unknown outcome)."""
    topic, partition = commit.topic, commit.partition
    if commit.segments and already_recorded(conn, topic, partition, commit.segments[0].stats):
        return False
    for segment in commit.segments:
        stats = segment.stats
        advance_for_segment(conn, topic, partition, stats, stamp)
        insert_segment(conn, topic, partition, segment, stamp)
        remember_schema(conn, topic, stats.schema_fingerprint, segment.schema, stamp)
    if commit.advance_to is not None:
        advance_over(conn, topic, partition, commit.advance_to, stamp)
    produced.record_producers(conn, topic, partition, commit.producers, stamp)
    return True


def already_recorded(conn: Connection, topic: str, partition: int, stats: SegmentStats) -> bool:
    """True when this exact segment is recorded; a different one at its start conflicts."""
    existing = conn.execute(
        _SEGMENT_AT,
        {"topic": topic, "partition": partition, "start_offset": stats.start_offset},
    ).first()
    if existing is None:
        return False
    end_offset, record_count = existing
    if end_offset == stats.end_offset and record_count == stats.record_count:
        return True
    raise ManifestConflictError(
        f"{topic}[{partition}] already has a segment at offset {stats.start_offset} "
        f"ending at {end_offset} ({record_count} rows); refusing "
        f"one ending at {stats.end_offset} ({stats.record_count} rows)"
    )


def advance_for_segment(
    conn: Connection, topic: str, partition: int, stats: SegmentStats, stamp: int
) -> None:
    """Move the watermark to the segment's end: compare-and-swap on the value read, so a
    concurrent writer of the same partition makes this transaction fail instead of both
    landing."""
    current = _watermark(conn, topic, partition)
    if current is not None and stats.start_offset < current:
        raise ManifestConflictError(
            f"{topic}[{partition}] segment [{stats.start_offset}, {stats.end_offset}) "
            f"overlaps the watermark {current}"
        )
    _move_watermark(conn, topic, partition, current, stats.end_offset, stamp)


def advance_over(
    conn: Connection, topic: str, partition: int, next_offset: int, stamp: int
) -> bool:
    """Move the watermark forward to `next_offset` over offsets that landed nowhere; never
    back (a segment recorded in the same transaction may have passed it already). Returns
    whether it moved."""
    current = _watermark(conn, topic, partition)
    if current is not None and current >= next_offset:
        return False
    _move_watermark(conn, topic, partition, current, next_offset, stamp)
    return True


def _watermark(conn: Connection, topic: str, partition: int) -> int | None:
    found: int | None = conn.execute(
        _WATERMARK, {"topic": topic, "partition": partition}
    ).scalar_one_or_none()
    return found


def _move_watermark(  # noqa: PLR0917 - the row's key, the value read and the new value
    conn: Connection, topic: str, partition: int, current: int | None, to: int, stamp: int
) -> None:
    """Set the watermark read as `current` (None: no row yet) to `to`, compare-and-swap."""
    key = {"topic": topic, "partition": partition}
    if current is None:
        conn.execute(_NEW_PARTITION, {**key, "next_offset": to, "stamp": stamp})
        return
    moved = conn.execute(
        _MOVE_WATERMARK, {**key, "next_offset": to, "stamp": stamp, "current": current}
    )
    if rowcount(moved) != 1:
        raise ManifestConflictError(f"{topic}[{partition}] watermark moved concurrently")


def insert_segment(
    conn: Connection, topic: str, partition: int, segment: SegmentFile, stamp: int
) -> int:
    """Add the segment's row, its promoted column statistics and its bloom filters; returns
    the row's id."""
    stats = segment.stats
    segment_id: int = conn.execute(
        _NEW_SEGMENT,
        {
            "topic": topic,
            "partition": partition,
            "start_offset": stats.start_offset,
            "end_offset": stats.end_offset,
            "record_count": stats.record_count,
            "time_min": stats.time_min,
            "time_max": stats.time_max,
            "size_bytes": stats.size_bytes,
            "path": segment.path,
            "schema_fingerprint": stats.schema_fingerprint,
            "state": SegmentState.SEALED.value,
            "created_at": stamp,
            "checksums": None if stats.checksums is None else stats.checksums.to_json(),
        },
    ).scalar_one()
    # Only ever beside a row inserted now: a replayed seal is caught before this by
    # already_recorded, so statistics are written once and never changed afterwards.
    columns = [
        {
            "segment_id": segment_id,
            "column_name": c.column,
            "kind": c.kind,
            "null_count": c.null_count,
            "min_value": c.min_value,
            "max_value": c.max_value,
        }
        for c in stats.columns
        if recordable(c.column)
    ]
    if columns:
        conn.execute(_NEW_COLUMN, columns)
    blooms = [
        {
            "segment_id": segment_id,
            "column_name": b.column,
            "kind": b.kind,
            "hash_count": b.hashes,
            "bits": b.bits,
        }
        for b in stats.blooms
        if recordable(b.column)
    ]
    if blooms:
        conn.execute(_NEW_BLOOM, blooms)
    return segment_id


def remember_schema(
    conn: Connection, topic: str, fingerprint: str, schema: pa.Schema, stamp: int
) -> bool:
    """Each distinct schema once per topic, so readers merge schemas without opening files.
    Returns True when it was new."""
    key = {"topic": topic, "fingerprint": fingerprint}
    if conn.execute(_SCHEMA_KNOWN, key).first() is not None:
        return False
    added = conn.execute(
        _NEW_SCHEMA,
        {
            **key,
            "arrow_schema": schema.remove_metadata().serialize().to_pybytes(),
            "first_seen": stamp,
        },
    )
    return rowcount(added) == 1


def rowcount(result: Any) -> int:
    return int(result.rowcount)
