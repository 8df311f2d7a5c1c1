"""Reading and removing what the manifest keeps to prune segments: promoted statistics
(`segment_columns`) and bloom filters (`segment_blooms`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from plateau_core.bloom import Bloom
from plateau_core.column_stats import KINDS, ColumnStats, Kind
from plateau_core.manifest.models import (
    MAX_COLUMN_NAME,
    READABLE_STATES,
    SegmentBloomRow,
    SegmentColumnRow,
    SegmentRow,
)

# Segment ids per statement: far below every database's limit on bound parameters.
_CHUNK = 500


def column_stats(
    session: Session,
    topic: str,
    columns: Iterable[str],
    segment_ids: Sequence[int] | None = None,
) -> dict[int, dict[str, ColumnStats]]:
    """The statistics of these columns in the topic's readable segments (only those of
    `segment_ids`, when given), by segment id."""
    names = _recordable(columns)
    found: dict[int, dict[str, ColumnStats]] = {}
    if not names or (segment_ids is not None and not segment_ids):
        return found
    if segment_ids is not None and len(segment_ids) <= _CHUNK:
        return _column_stats_of(session, names, segment_ids)
    # Column tuples rather than ORM objects: this runs while planning every `where` read.
    c = SegmentColumnRow
    query = (
        select(c.segment_id, c.column_name, c.kind, c.null_count, c.min_value, c.max_value)
        .join(SegmentRow, SegmentRow.id == SegmentColumnRow.segment_id)
        .where(
            SegmentRow.topic == topic,
            SegmentRow.state.in_([s.value for s in READABLE_STATES]),
            SegmentColumnRow.column_name.in_(names),
        )
    )
    for segment_id, column, kind_text, nulls, low, high in session.execute(query):
        kind = _kind(kind_text)
        if kind is not None:
            found.setdefault(segment_id, {})[column] = ColumnStats(column, kind, nulls, low, high)
    return found


def _column_stats_of(
    session: Session, names: list[str], segment_ids: Sequence[int]
) -> dict[int, dict[str, ColumnStats]]:
    """By primary key: a few segments' statistics without a pass over the topic's."""
    c = SegmentColumnRow
    query = select(
        c.segment_id, c.column_name, c.kind, c.null_count, c.min_value, c.max_value
    ).where(c.segment_id.in_(list(segment_ids)), c.column_name.in_(names))
    found: dict[int, dict[str, ColumnStats]] = {}
    for segment_id, column, kind_text, nulls, low, high in session.execute(query):
        kind = _kind(kind_text)
        if kind is not None:
            found.setdefault(segment_id, {})[column] = ColumnStats(column, kind, nulls, low, high)
    return found


def blooms(session: Session, topic: str, columns: Iterable[str]) -> dict[int, dict[str, Bloom]]:
    """The bloom filters of these columns in the topic's readable segments, by segment id."""
    names = _recordable(columns)
    found: dict[int, dict[str, Bloom]] = {}
    if not names:
        return found
    b = SegmentBloomRow
    query = (
        select(b.segment_id, b.column_name, b.kind, b.hash_count, b.bits)
        .join(SegmentRow, SegmentRow.id == SegmentBloomRow.segment_id)
        .where(
            SegmentRow.topic == topic,
            SegmentRow.state.in_([s.value for s in READABLE_STATES]),
            SegmentBloomRow.column_name.in_(names),
        )
    )
    _add_blooms(found, session.execute(query))
    return found


def blooms_by_id(
    session: Session, segment_ids: Sequence[int], columns: Sequence[str]
) -> dict[int, dict[str, Bloom]]:
    """The bloom filters of these columns in these segments, by segment id then column."""
    found: dict[int, dict[str, Bloom]] = {}
    names = _recordable(columns)
    if not names:
        return found
    b = SegmentBloomRow
    ids = list(segment_ids)
    for at in range(0, len(ids), _CHUNK):
        query = select(b.segment_id, b.column_name, b.kind, b.hash_count, b.bits).where(
            b.segment_id.in_(ids[at : at + _CHUNK]), b.column_name.in_(names)
        )
        _add_blooms(found, session.execute(query))
    return found


def _recordable(columns: Iterable[str]) -> list[str]:
    """The columns that can have statistics or filters (`recordable`)."""
    return sorted({c for c in columns if recordable(c)})


def recordable(column: str) -> bool:
    """Whether the manifest can hold statistics or a filter of this column: a name holding a
    NUL character (PostgreSQL text cannot hold it, and refuses it even as a query parameter)
    or longer than the tables' column names has none, and is read unpruned."""
    return "\x00" not in column and len(column) <= MAX_COLUMN_NAME


def _add_blooms(found: dict[int, dict[str, Bloom]], rows: Iterable[Any]) -> None:
    """(segment_id, column, kind, hash_count, bits) rows into `found`, by segment then column."""
    for segment_id, column, kind, hashes, bits in rows:
        if kind not in ("int", "bytes"):
            continue  # a kind this version does not know: left unused, never misread
        found.setdefault(segment_id, {})[column] = Bloom(
            column, "int" if kind == "int" else "bytes", hashes, bits
        )


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
