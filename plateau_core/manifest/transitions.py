"""Segment state changes: sealed → replicated (moving the partition's replicated offset),
→ quarantined, → deleting, and the removal of deleting rows. Each function runs inside a
write transaction the Manifest opened."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from plateau_core.manifest import promoted
from plateau_core.manifest.commit import rowcount
from plateau_core.manifest.models import PartitionRow, SegmentRow, SegmentState
from plateau_core.manifest.records import now_ms


class NotWholeError(Exception):
    """mark_replicated(whole=True) found a segment no longer sealed."""


def move(
    session: Session,
    segment_ids: Sequence[int],
    from_states: Sequence[SegmentState],
    to_state: SegmentState,
    **values: Any,
) -> list[int]:
    """The listed segments that are in `from_states` move to `to_state` (with `values`);
    returns their ids."""
    allowed = [s.value for s in from_states]
    # The ids the UPDATE itself changed, not a SELECT's before it: under PostgreSQL's READ
    # COMMITTED, a row another transaction moves on while this one waits for its lock is
    # skipped by the UPDATE, though a SELECT just before still saw it in `from_states`.
    moved = session.scalars(
        update(SegmentRow)
        .where(SegmentRow.id.in_(list(segment_ids)), SegmentRow.state.in_(allowed))
        .values(state=to_state.value, **values)
        .returning(SegmentRow.id)
        .execution_options(synchronize_session=False)
    )
    return sorted(moved)


def mark_replicated(session: Session, segment_ids: Sequence[int], *, whole: bool) -> list[int]:
    """sealed → replicated, and each partition's replicated_offset past them. Raises
    NotWholeError when `whole` and any of them was no longer sealed: the caller's
    transaction then rolls the moves back."""
    moved = move(
        session,
        segment_ids,
        (SegmentState.SEALED,),
        SegmentState.REPLICATED,
        replicated_at=now_ms(),
    )
    if whole and len(moved) != len(set(segment_ids)):
        raise NotWholeError
    if not moved:
        return []
    ends = session.execute(
        select(SegmentRow.topic, SegmentRow.partition, func.max(SegmentRow.end_offset))
        .where(SegmentRow.id.in_(moved))
        .group_by(SegmentRow.topic, SegmentRow.partition)
    ).all()
    for topic, partition, end_offset in ends:
        session.execute(
            update(PartitionRow)
            .where(
                PartitionRow.topic == topic,
                PartitionRow.partition == partition,
                PartitionRow.replicated_offset < end_offset,
            )
            .values(replicated_offset=end_offset, updated_at=now_ms())
        )
    return moved


def remove(session: Session, segment_ids: Sequence[int]) -> int:
    """Drop the rows, statistics and filters of those segments already marked deleting;
    returns how many rows went."""
    gone = list(
        session.scalars(
            select(SegmentRow.id).where(
                SegmentRow.id.in_(list(segment_ids)),
                SegmentRow.state == SegmentState.DELETING.value,
            )
        )
    )
    promoted.remove_indexes(session, gone)
    result = session.execute(delete(SegmentRow).where(SegmentRow.id.in_(gone)))
    return rowcount(result)
