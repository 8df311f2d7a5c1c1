"""Which segments a read covers: the query behind `Manifest.segments`, and a lighter one for
reads that prune by bloom filters first.

A needle read lists every segment of a topic (5,000 in the pruning benchmark) to keep about
1% of them; building a full record of 17 columns for each was half its planning. So such a
read lists spans only (`SegmentSpan`, 6 columns), prunes them, and then reads the full
records of the few kept, by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Select, select

from plateau_core.manifest.models import READABLE_STATES, SegmentRow, SegmentState
from plateau_core.manifest.records import RECORD_COLUMNS

_CHUNK = 500  # ids per statement: far below every database's limit on bound parameters


class SegmentSpan(NamedTuple):
    """What pruning needs of a segment: where it is, and how many rows it holds."""

    id: int
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    record_count: int


SPAN_COLUMNS = (
    SegmentRow.id,
    SegmentRow.topic,
    SegmentRow.partition,
    SegmentRow.start_offset,
    SegmentRow.end_offset,
    SegmentRow.record_count,
)


class SegmentAge(NamedTuple):
    """What retention weighs of a segment: its age, size and whether it is replicated. A pass
    lists every live segment; full records of 300,000 took 3.4 s to list, these 1.2 s."""

    id: int
    topic: str
    partition: int
    start_offset: int
    time_max: int
    size_bytes: int
    replicated: bool


AGE_COLUMNS = (
    SegmentRow.id,
    SegmentRow.topic,
    SegmentRow.partition,
    SegmentRow.start_offset,
    SegmentRow.time_max,
    SegmentRow.size_bytes,
    SegmentRow.state,
)


def segment_query(
    columns: Sequence[Any],
    topic: str | None,
    *,
    partitions: Iterable[int] | None = None,
    start_offset: int | None = None,
    end_offset: int | None = None,
    time_start: int | None = None,
    time_end: int | None = None,
    states: Sequence[SegmentState] = READABLE_STATES,
) -> Select[Any]:
    """Segments overlapping the offset range [start, end) and time range [start, end), in
    (topic, partition, start_offset) order."""
    query = select(*columns).where(SegmentRow.state.in_([s.value for s in states]))
    if topic is not None:
        query = query.where(SegmentRow.topic == topic)
    if partitions is not None:
        query = query.where(SegmentRow.partition.in_(list(partitions)))
    if start_offset is not None:
        query = query.where(SegmentRow.end_offset > start_offset)
    if end_offset is not None:
        query = query.where(SegmentRow.start_offset < end_offset)
    if time_start is not None:
        query = query.where(SegmentRow.time_max >= time_start)
    if time_end is not None:
        query = query.where(SegmentRow.time_min < time_end)
    return query.order_by(SegmentRow.topic, SegmentRow.partition, SegmentRow.start_offset)


def by_id_queries(segment_ids: Sequence[int]) -> list[Select[Any]]:
    """Full records of these segments, whatever their state now (the caller checks)."""
    ids = list(segment_ids)
    columns: Sequence[Any] = RECORD_COLUMNS
    return [
        select(*columns).where(SegmentRow.id.in_(ids[at : at + _CHUNK]))
        for at in range(0, len(ids), _CHUNK)
    ]
