"""Reading and removing the promoted statistics of segments (the `segment_columns` table)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from plateau_core.column_stats import KINDS, ColumnStats, Kind
from plateau_core.manifest.models import READABLE_STATES, SegmentColumnRow, SegmentRow

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


def remove_columns(session: Session, segment_ids: Sequence[int]) -> None:
    """Inside the transaction removing these segments' rows: their statistics go too."""
    ids = list(segment_ids)
    for at in range(0, len(ids), _CHUNK):
        chunk = ids[at : at + _CHUNK]
        session.execute(delete(SegmentColumnRow).where(SegmentColumnRow.segment_id.in_(chunk)))


def _kind(text: str) -> Kind | None:
    """The kind named; None for one this version does not know (written by a newer one),
    whose bounds are then left unused rather than misread."""
    return next((kind for kind in KINDS if kind == text), None)
