"""The manifest's tables for the consume path: offsets this store will never hold (gaps),
and the Kafka topic each consumed partition comes from. Each function runs inside a
transaction the Manifest opened."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from plateau_core.manifest.models import GapRow, SourceTopicRow


def record_gap(  # noqa: PLR0917 - the partition, the offsets and the time
    session: Session, topic: str, partition: int, from_offset: int, to_offset: int, stamp: int
) -> None:
    session.add(
        GapRow(
            topic=topic,
            partition=partition,
            from_offset=from_offset,
            to_offset=to_offset,
            detected_at=stamp,
        )
    )


def gaps(session: Session, topic: str) -> list[tuple[int, int, int]]:
    rows = session.execute(
        select(GapRow.partition, GapRow.from_offset, GapRow.to_offset)
        .where(GapRow.topic == topic)
        .order_by(GapRow.partition, GapRow.from_offset)
    )
    return [(p, lo, hi) for p, lo, hi in rows]


def source_topic(session: Session, topic: str, partition: int) -> tuple[str, str] | None:
    row = session.get(SourceTopicRow, (topic, partition))
    return None if row is None else (row.source, row.topic_id)


def consumed_topics(session: Session) -> set[str]:
    return set(session.scalars(select(SourceTopicRow.topic).distinct()))


def record_source_topic(  # noqa: PLR0917 - the partition, its source and the time
    session: Session, topic: str, partition: int, source: str, topic_id: str, stamp: int
) -> None:
    row = session.get(SourceTopicRow, (topic, partition))
    if row is None:
        session.add(
            SourceTopicRow(
                topic=topic,
                partition=partition,
                source=source,
                topic_id=topic_id,
                recorded_at=stamp,
            )
        )
    else:
        row.source, row.topic_id, row.recorded_at = source, topic_id, stamp
