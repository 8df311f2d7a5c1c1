"""Reading and removing what the manifest keeps to prune segments: promoted statistics
(`segment_columns`) and bloom filters (`segment_blooms`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from plateau_core.bloom import Bloom
from plateau_core.column_stats import KINDS, ColumnStats, Kind
from plateau_core.manifest.models import (
    READABLE_STATES,
    SegmentBloomRow,
    SegmentColumnRow,
    SegmentRow,
)

# Segment ids per statement: far below every database's limit on bound parameters.
_CHUNK = 500


def column_stats(
    session: Session, topic: str, columns: Iterable[str]
) -> dict[int, dict[str, ColumnStats]]:
    """The statistics of these columns in the topic's readable segments, by segment id."""
    names = sorted(set(columns))
    found: dict[int, dict[str, ColumnStats]] = {}
    if not names:
        return found
    query = (
        select(SegmentColumnRow)
        .join(SegmentRow, SegmentRow.id == SegmentColumnRow.segment_id)
        .where(
            SegmentRow.topic == topic,
            SegmentRow.state.in_([s.value for s in READABLE_STATES]),
            SegmentColumnRow.column_name.in_(names),
        )
    )
    for row in session.scalars(query):
        kind = _kind(row.kind)
        if kind is None:
            continue
        found.setdefault(row.segment_id, {})[row.column_name] = ColumnStats(
            column=row.column_name,
            kind=kind,
            null_count=row.null_count,
            min_value=row.min_value,
            max_value=row.max_value,
        )
    return found


def blooms(session: Session, topic: str, columns: Iterable[str]) -> dict[int, dict[str, Bloom]]:
    """The bloom filters of these columns in the topic's readable segments, by segment id."""
    names = sorted(set(columns))
    found: dict[int, dict[str, Bloom]] = {}
    if not names:
        return found
    query = (
        select(SegmentBloomRow)
        .join(SegmentRow, SegmentRow.id == SegmentBloomRow.segment_id)
        .where(
            SegmentRow.topic == topic,
            SegmentRow.state.in_([s.value for s in READABLE_STATES]),
            SegmentBloomRow.column_name.in_(names),
        )
    )
    for row in session.scalars(query):
        if row.kind not in ("int", "bytes"):
            continue  # a kind this version does not know: left unused, never misread
        found.setdefault(row.segment_id, {})[row.column_name] = Bloom(
            row.column_name, "int" if row.kind == "int" else "bytes", row.hash_count, row.bits
        )
    return found


def remove_indexes(session: Session, segment_ids: Sequence[int]) -> None:
    """Inside the transaction removing these segments' rows: their statistics and filters
    go too."""
    ids = list(segment_ids)
    for at in range(0, len(ids), _CHUNK):
        chunk = ids[at : at + _CHUNK]
        session.execute(delete(SegmentColumnRow).where(SegmentColumnRow.segment_id.in_(chunk)))
        session.execute(delete(SegmentBloomRow).where(SegmentBloomRow.segment_id.in_(chunk)))


def _kind(text: str) -> Kind | None:
    """The kind named; None for one this version does not know (written by a newer one),
    whose bounds are then left unused rather than misread."""
    return next((kind for kind in KINDS if kind == text), None)
