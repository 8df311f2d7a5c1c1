"""Rows for files the manifest keeps but never serves, recorded when rebuilding a manifest:
quarantined files, and consolidated segments' inputs found beside them (retired). Runs
inside a write transaction the Manifest opened."""

from __future__ import annotations

from sqlalchemy.orm import Session

from plateau_core.manifest.models import SegmentRow, SegmentState
from plateau_core.segment_stats import SegmentStats

# Held for the instant between a retired row's insert and its key -id - 1.
PLACEHOLDER_START = -(2**62)


def record_unserved(
    session: Session,
    topic: str,
    partition: int,
    path: str,
    *,
    state: SegmentState,
    problem: str | None,
    start_offset: int,
    end_offset: int,
    size_bytes: int,
    stats: SegmentStats | None,
    stamp: int,
) -> None:
    """Add a row in `state` (quarantined, or deleting for a retired file) that leaves the
    watermark where it is; `stats` fills in what the file told, when it was read."""
    row = SegmentRow(
        topic=topic,
        partition=partition,
        start_offset=start_offset,
        end_offset=end_offset,
        record_count=0 if stats is None else stats.record_count,
        time_min=0 if stats is None else stats.time_min,
        time_max=0 if stats is None else stats.time_max,
        size_bytes=size_bytes,
        path=path,
        schema_fingerprint="" if stats is None else stats.schema_fingerprint,
        state=state.value,
        created_at=stamp,
        deleting_at=stamp if state == SegmentState.DELETING else None,
        problem=problem,
        checksums=None if stats is None or stats.checksums is None else stats.checksums.to_json(),
    )
    session.add(row)
    if state == SegmentState.DELETING:
        session.flush()
        row.start_offset = -row.id - 1  # the key a swap gives a retired row
