"""The manifest's tables for the produce path: topics producers write to, idempotent
producers' last batches, and the counter producer ids come from. Each function runs inside
a transaction the Manifest opened."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, select, text, update
from sqlalchemy.orm import Session

from plateau_core.errors import ManifestConflictError
from plateau_core.manifest.models import CounterRow, ProducedTopicRow, ProducerRow
from plateau_core.producers import ProducerBatch, ProducerState, batches_json, batches_of, merged

PRODUCER_IDS = "producer_id"
# `created_by` of a topic the configuration lists (the others: create_topics, auto_create).
CONFIG = "config"


def produced_topics(session: Session) -> dict[str, int]:
    rows = session.execute(select(ProducedTopicRow.topic, ProducedTopicRow.partitions))
    return {topic: partitions for topic, partitions in rows}


def produced_topic_origins(session: Session) -> dict[str, str]:
    rows = session.execute(select(ProducedTopicRow.topic, ProducedTopicRow.created_by))
    return {topic: created_by for topic, created_by in rows}


def ensure_produced_topic(
    session: Session, topic: str, partitions: int, created_by: str, stamp: int
) -> int:
    """Record `topic` with at least `partitions`; returns its partition count, which never
    shrinks (producers that saw more partitions must still find them)."""
    row = session.get(ProducedTopicRow, topic)
    if row is None:
        session.add(
            ProducedTopicRow(
                topic=topic, partitions=partitions, created_by=created_by, created_at=stamp
            )
        )
        return partitions
    changes: dict[str, object] = {}
    if partitions > row.partitions:
        changes["partitions"] = partitions
    if row.created_by == CONFIG and created_by != CONFIG:
        # A topic the config listed once, removed from it, then created by producers: it is
        # theirs now, and served again after a restart.
        changes["created_by"] = created_by
    if changes:
        session.execute(
            update(ProducedTopicRow)
            .where(ProducedTopicRow.topic == topic)
            .values(**changes)
            .execution_options(synchronize_session=False)
        )
    return max(partitions, row.partitions)


def next_counter(session: Session, name: str) -> int:
    """The counter's next value (0 the first time); never the same twice."""
    row = session.get(CounterRow, name)
    if row is None:
        session.add(CounterRow(name=name, value=1))
        return 0
    value = row.value
    moved = session.execute(
        update(CounterRow)
        .where(CounterRow.name == name, CounterRow.value == value)
        .values(value=value + 1)
        .execution_options(synchronize_session=False)
    )
    if moved.rowcount != 1:  # type: ignore[attr-defined]
        raise ManifestConflictError(f"counter {name!r} moved concurrently")
    return value


def expire_producers(session: Session, before_ms: int) -> int:
    """Delete the producer states last written before `before_ms`; returns how many."""
    gone = session.execute(
        delete(ProducerRow)
        .where(ProducerRow.updated_at < before_ms)
        .execution_options(synchronize_session=False)
    )
    count: int = gone.rowcount  # type: ignore[attr-defined]
    return count


def raise_counter(session: Session, name: str, at_least: int) -> None:
    """Make the counter's next value at least `at_least`."""
    row = session.get(CounterRow, name)
    if row is None:
        session.add(CounterRow(name=name, value=at_least))
    elif row.value < at_least:
        row.value = at_least


def producer_states(session: Session, topic: str, partition: int) -> dict[int, ProducerState]:
    rows = session.scalars(
        select(ProducerRow).where(ProducerRow.topic == topic, ProducerRow.partition == partition)
    )
    return {
        row.producer_id: ProducerState(
            row.producer_id, row.epoch, batches_of(row.producer_id, row.epoch, row.batches)
        )
        for row in rows
    }


_PRODUCER = text(
    'SELECT epoch, batches FROM producers WHERE topic = :topic AND "partition" = :partition '
    "AND producer_id = :producer_id"
)
_NEW_PRODUCER = text(
    'INSERT INTO producers (topic, "partition", producer_id, epoch, batches, updated_at) '
    "VALUES (:topic, :partition, :producer_id, :epoch, :batches, :updated_at)"
)
_UPDATE_PRODUCER = text(
    "UPDATE producers SET epoch = :epoch, batches = :batches, updated_at = :updated_at "
    'WHERE topic = :topic AND "partition" = :partition AND producer_id = :producer_id'
)


def record_producers(
    conn: Connection,
    topic: str,
    partition: int,
    batches: Sequence[ProducerBatch],
    stamp: int,
) -> None:
    """Add the producer batches of a segment being recorded to what the manifest holds
    (prepared statements on the seal commit's connection, like manifest/commit.py)."""
    if not batches:
        return
    states: dict[int, ProducerState] = {}
    for pid in sorted({b.producer_id for b in batches}):
        key = {"topic": topic, "partition": partition, "producer_id": pid}
        found = conn.execute(_PRODUCER, key).first()
        if found is not None:
            states[pid] = ProducerState(pid, found[0], batches_of(pid, found[0], found[1]))
    known = set(states)
    merged(states, batches)
    for pid, state in states.items():
        values = {
            "topic": topic,
            "partition": partition,
            "producer_id": pid,
            "epoch": state.epoch,
            "batches": batches_json(state.batches),
            "updated_at": stamp,
        }
        conn.execute(_UPDATE_PRODUCER if pid in known else _NEW_PRODUCER, values)
