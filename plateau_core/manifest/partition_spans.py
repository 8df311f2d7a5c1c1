"""What each partition holds, in one query: its watermark, replicated offset and what its
readable segments cover (`plateau status`, metrics, replication's progress)."""

from __future__ import annotations

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from plateau_core.manifest.models import READABLE_STATES, PartitionRow, SegmentRow
from plateau_core.manifest.records import PartitionSpan


def partition_spans(session: Session, topic: str | None) -> list[PartitionSpan]:
    """Each partition's span, by topic and partition (`topic`: that topic's only)."""
    readable = [s.value for s in READABLE_STATES]
    seg = SegmentRow
    counts = (
        select(
            seg.topic,
            seg.partition,
            func.count(seg.id).label("segments"),
            func.coalesce(func.sum(seg.record_count), 0).label("records"),
            func.coalesce(func.sum(seg.size_bytes), 0).label("bytes"),
            func.min(seg.start_offset).label("start_offset"),
            func.min(seg.time_min).label("time_min"),
            func.max(seg.time_max).label("time_max"),
        )
        .where(seg.state.in_(readable))
        .group_by(seg.topic, seg.partition)
        .subquery()
    )
    query = (
        select(PartitionRow, counts)
        .outerjoin(
            counts,
            and_(
                counts.c.topic == PartitionRow.topic,
                counts.c.partition == PartitionRow.partition,
            ),
        )
        .order_by(PartitionRow.topic, PartitionRow.partition)
    )
    if topic is not None:
        query = query.where(PartitionRow.topic == topic)
    return [
        PartitionSpan(
            topic=row.PartitionRow.topic,
            partition=row.PartitionRow.partition,
            next_offset=row.PartitionRow.next_offset,
            replicated_offset=row.PartitionRow.replicated_offset,
            segments=row.segments or 0,
            records=int(row.records or 0),
            bytes=int(row.bytes or 0),
            start_offset=row.start_offset,
            time_min=row.time_min,
            time_max=row.time_max,
        )
        for row in session.execute(query)
    ]
