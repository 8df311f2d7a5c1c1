"""The steps of the seal commit, each run inside the manifest's write transaction.

Manifest.commit_segment calls them in order: is this exact segment recorded already, move
the watermark (compare-and-swap), add the segment row, remember the schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from plateau_core.errors import ManifestConflictError
from plateau_core.manifest.models import PartitionRow, SchemaRow, SegmentRow, SegmentState
from plateau_core.segment_stats import SegmentStats

if TYPE_CHECKING:
    import pyarrow as pa


def already_recorded(session: Session, topic: str, partition: int, stats: SegmentStats) -> bool:
    """True when this exact segment is recorded; a different one at its start conflicts."""
    existing = session.scalars(
        select(SegmentRow).where(
            SegmentRow.topic == topic,
            SegmentRow.partition == partition,
            SegmentRow.start_offset == stats.start_offset,
        )
    ).one_or_none()
    if existing is None:
        return False
    if existing.end_offset == stats.end_offset and existing.record_count == stats.record_count:
        return True
    raise ManifestConflictError(
        f"{topic}[{partition}] already has a segment at offset {stats.start_offset} "
        f"ending at {existing.end_offset} ({existing.record_count} rows); refusing "
        f"one ending at {stats.end_offset} ({stats.record_count} rows)"
    )


def advance_for_segment(
    session: Session, topic: str, partition: int, stats: SegmentStats, stamp: int
) -> None:
    """Move the watermark to the segment's end: compare-and-swap on the value read, so a
    concurrent writer of the same partition makes this transaction fail instead of both
    landing."""
    current = session.get(PartitionRow, (topic, partition))
    if current is None:
        session.add(
            PartitionRow(
                topic=topic,
                partition=partition,
                next_offset=stats.end_offset,
                replicated_offset=0,
                updated_at=stamp,
            )
        )
        return
    if stats.start_offset < current.next_offset:
        raise ManifestConflictError(
            f"{topic}[{partition}] segment [{stats.start_offset}, {stats.end_offset}) "
            f"overlaps the watermark {current.next_offset}"
        )
    moved = session.execute(
        update(PartitionRow)
        .where(
            PartitionRow.topic == topic,
            PartitionRow.partition == partition,
            PartitionRow.next_offset == current.next_offset,
        )
        .values(next_offset=stats.end_offset, updated_at=stamp)
        .execution_options(synchronize_session=False)
    )
    if rowcount(moved) != 1:
        raise ManifestConflictError(f"{topic}[{partition}] watermark moved concurrently")


def segment_row(
    topic: str, partition: int, stats: SegmentStats, path: str, stamp: int
) -> SegmentRow:
    return SegmentRow(
        topic=topic,
        partition=partition,
        start_offset=stats.start_offset,
        end_offset=stats.end_offset,
        record_count=stats.record_count,
        time_min=stats.time_min,
        time_max=stats.time_max,
        size_bytes=stats.size_bytes,
        path=path,
        schema_fingerprint=stats.schema_fingerprint,
        state=SegmentState.SEALED.value,
        created_at=stamp,
        checksums=None if stats.checksums is None else stats.checksums.to_json(),
    )


def remember_schema(
    session: Session, topic: str, fingerprint: str, schema: pa.Schema, stamp: int
) -> None:
    """Each distinct schema once per topic, so readers merge schemas without opening files."""
    if session.get(SchemaRow, (topic, fingerprint)) is None:
        session.add(
            SchemaRow(
                topic=topic,
                fingerprint=fingerprint,
                arrow_schema=schema.remove_metadata().serialize().to_pybytes(),
                first_seen=stamp,
            )
        )


def rowcount(result: Any) -> int:
    return int(result.rowcount)
