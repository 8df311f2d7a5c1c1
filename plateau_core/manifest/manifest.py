"""The manifest: which segments exist, their spans, and each partition's watermark."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from plateau_core.errors import ManifestConflictError
from plateau_core.manifest import produced, promoted, swap
from plateau_core.manifest.commit import (
    advance_for_segment,
    advance_over,
    already_recorded,
    insert_segment,
    remember_schema,
    rowcount,
)
from plateau_core.manifest.models import (
    READABLE_STATES,
    GapRow,
    PartitionRow,
    SchemaRow,
    SegmentRow,
    SegmentState,
    SourceTopicRow,
)
from plateau_core.manifest.records import (
    PartitionCommit,
    PartitionSpan,
    SegmentFile,
    SegmentRecord,
    now_ms,
)
from plateau_core.manifest.segment_reads import SegmentReads
from plateau_core.producers import ProducerBatch, ProducerState
from plateau_core.segment_stats import SegmentStats

if TYPE_CHECKING:
    import pyarrow as pa


# Held for the instant between a retired row's insert and its key -id - 1.
_PLACEHOLDER_START = -(2**62)


class Manifest(SegmentReads):
    """Typed access to the manifest database; every change is one short transaction."""

    # --- the seal commit -------------------------------------------------------------------

    def commit_segment(
        self,
        topic: str,
        partition: int,
        stats: SegmentStats,
        path: str,
        schema: pa.Schema,
        *,
        producers: Sequence[ProducerBatch] = (),
    ) -> bool:
        """Record a sealed segment and advance the watermark in one transaction, with the
        idempotent producers' batches it holds.

        Returns True when recorded now, False when this exact segment was already recorded
        (a re-commit of the same seal is a no-op). Raises ManifestConflictError when the segment
        overlaps what the partition already holds.
        """
        segment = SegmentFile(stats, path, schema)
        commit = PartitionCommit(topic, partition, (segment,), tuple(producers))
        return self.commit_seal([commit])[0]

    def commit_seal(self, commits: Sequence[PartitionCommit]) -> list[bool]:
        """Record the seals of several partitions in one transaction: one commit, one sync
        of the database, for all of them (a group commit), and all of it or none.

        Each answer is True when that partition's seal was recorded now, False when it was
        recorded already (its first segment is there: a retry after an unknown outcome).
        Any conflict raises ManifestConflictError and records nothing.
        """
        stamp = now_ms()
        recorded: list[bool] = []
        with self._write() as session:
            conn = session.connection()
            try:
                for commit in commits:
                    recorded.append(_record_partition(conn, commit, stamp))
            except IntegrityError as exc:
                where = ", ".join(c.describe() for c in commits)
                raise ManifestConflictError(f"a seal of {where} was recorded concurrently") from exc
        return recorded

    def record_quarantined(
        self,
        topic: str,
        partition: int,
        path: str,
        problem: str,
        *,
        start_offset: int,
        end_offset: int,
        size_bytes: int,
        stats: SegmentStats | None = None,
    ) -> None:
        """Record a file that must not be served as a quarantined row (rebuilding a manifest).

        The row keeps the file from being removed as an orphan and lists it in reports. It
        does not move the watermark. `stats` fills in what the file told, when it was read.
        """
        self._record_unserved(
            topic,
            partition,
            path,
            state=SegmentState.QUARANTINED,
            problem=problem,
            start_offset=start_offset,
            end_offset=end_offset,
            size_bytes=size_bytes,
            stats=stats,
        )

    def record_retired(
        self, topic: str, partition: int, path: str, stats: SegmentStats, size_bytes: int
    ) -> None:
        """Record a consolidated segment's input file found beside it (rebuilding a manifest
        during the deletion grace) as retired, as the swap left it: retention removes it."""
        self._record_unserved(
            topic,
            partition,
            path,
            state=SegmentState.DELETING,
            problem=None,
            start_offset=_PLACEHOLDER_START,
            end_offset=stats.end_offset,
            size_bytes=size_bytes,
            stats=stats,
        )

    def _record_unserved(
        self,
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
    ) -> None:
        stamp = now_ms()
        with self._write() as session:
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
                checksums=None
                if stats is None or stats.checksums is None
                else stats.checksums.to_json(),
            )
            session.add(row)
            if state == SegmentState.DELETING:
                session.flush()
                row.start_offset = -row.id - 1  # the key a swap gives a retired row

    def swap_segments(self, run: Sequence[SegmentRecord], merged: SegmentFile) -> int:
        """Replace a run of one partition's segments by `merged`, which holds their rows, in
        one transaction: the run's rows move to deleting (their files stay for the deletion
        grace), the merged row takes their state. Returns its id.

        Raises ManifestConflictError, changing nothing, when a row of the run changed.
        """
        with self._write() as session:
            return swap.swap(session.connection(), run, merged, now_ms())

    def advance_watermark(self, topic: str, partition: int, next_offset: int) -> bool:
        """Move the watermark forward over offsets that land nowhere (skipped records).

        Only forward; returns whether it moved. (The writer moves it inside its seal
        transaction instead; this is for tools and tests.)
        """
        with self._write() as session:
            return advance_over(session.connection(), topic, partition, next_offset, now_ms())

    def produced_topics(self) -> dict[str, int]:
        """Topics producers write to plateau's Kafka API, with their partition counts."""
        with self._read() as session:
            return produced.produced_topics(session)

    def ensure_produced_topic(self, topic: str, partitions: int, created_by: str) -> int:
        """Record a produced topic with at least `partitions`; returns its count."""
        with self._write() as session:
            return produced.ensure_produced_topic(session, topic, partitions, created_by, now_ms())

    def next_producer_id(self) -> int:
        """A producer id never handed out before, by this store."""
        with self._write() as session:
            return produced.next_counter(session, produced.PRODUCER_IDS)

    def expire_producers(self, before_ms: int) -> int:
        """Forget idempotent producers not heard from since `before_ms`; returns how many
        (producer, partition) states went."""
        with self._write() as session:
            return produced.expire_producers(session, before_ms)

    def skip_producer_ids(self, below: int) -> None:
        """Hand out no producer id below `below` from now on."""
        with self._write() as session:
            produced.raise_counter(session, produced.PRODUCER_IDS, below)

    def producer_states(self, topic: str, partition: int) -> dict[int, ProducerState]:
        """Each idempotent producer's epoch and last batches on the partition, as sealed."""
        with self._read() as session:
            return produced.producer_states(session, topic, partition)

    # --- reads -----------------------------------------------------------------------------

    def segment_state(self, segment_id: int) -> SegmentState | None:
        """The row's state now, or None once it was removed."""
        with self._read() as session:
            state = session.scalar(select(SegmentRow.state).where(SegmentRow.id == segment_id))
            return None if state is None else SegmentState(state)

    def watermark(self, topic: str, partition: int) -> int | None:
        """The partition's next offset to ingest (none below it is ingested again); None
        when the partition was never written."""
        with self._read() as session:
            row = session.get(PartitionRow, (topic, partition))
            return None if row is None else row.next_offset

    def has_segment(self, topic: str, partition: int, stats: SegmentStats) -> bool:
        """Whether exactly this segment is recorded (to tell a lost commit from a failed one)."""
        with self._read() as session:
            found = session.scalar(
                select(func.count(SegmentRow.id)).where(
                    SegmentRow.topic == topic,
                    SegmentRow.partition == partition,
                    SegmentRow.start_offset == stats.start_offset,
                    SegmentRow.end_offset == stats.end_offset,
                )
            )
            return bool(found)

    def record_gap(self, topic: str, partition: int, from_offset: int, to_offset: int) -> None:
        """Record offsets [from_offset, to_offset) this store will never hold (Kafka deleted
        them before plateau read them, or another node's store holds them). The watermark
        does not move."""
        with self._write() as session:
            session.add(
                GapRow(
                    topic=topic,
                    partition=partition,
                    from_offset=from_offset,
                    to_offset=to_offset,
                    detected_at=now_ms(),
                )
            )

    def source_topic(self, topic: str, partition: int) -> tuple[str, str] | None:
        """(Kafka topic, its topic id) recorded for a consumed partition, if any."""
        with self._read() as session:
            row = session.get(SourceTopicRow, (topic, partition))
            return None if row is None else (row.source, row.topic_id)

    def record_source_topic(self, topic: str, partition: int, source: str, topic_id: str) -> None:
        """Record the Kafka topic (and its id) a consumed partition comes from now."""
        with self._write() as session:
            row = session.get(SourceTopicRow, (topic, partition))
            if row is None:
                session.add(
                    SourceTopicRow(
                        topic=topic,
                        partition=partition,
                        source=source,
                        topic_id=topic_id,
                        recorded_at=now_ms(),
                    )
                )
            else:
                row.source, row.topic_id, row.recorded_at = source, topic_id, now_ms()

    def gaps(self, topic: str) -> list[tuple[int, int, int]]:
        """(partition, from_offset, to_offset) of every recorded gap of a topic."""
        with self._read() as session:
            rows = session.execute(
                select(GapRow.partition, GapRow.from_offset, GapRow.to_offset)
                .where(GapRow.topic == topic)
                .order_by(GapRow.partition, GapRow.from_offset)
            )
            return [(p, lo, hi) for p, lo, hi in rows]

    def topics(self) -> list[str]:
        """Every topic with a watermark, sorted."""
        with self._read() as session:
            return list(session.scalars(select(PartitionRow.topic).distinct().order_by("topic")))

    def spans(self, topic: str | None = None) -> list[PartitionSpan]:
        """Each partition's watermark, replicated offset and what its readable segments
        cover, by topic and partition (`topic`: that topic's only)."""
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
        with self._read() as session:
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

    def schemas(self, topic: str) -> dict[str, pa.Schema]:
        """Every schema the topic's segments were ever written with, by fingerprint, oldest
        first (kept after its segments are gone)."""
        # Here rather than at the top: reading spans and watermarks (`plateau status`) must
        # not pay for loading Arrow.
        from pyarrow import ipc, py_buffer  # noqa: PLC0415

        with self._read() as session:
            rows = session.scalars(
                select(SchemaRow).where(SchemaRow.topic == topic).order_by(SchemaRow.first_seen)
            )
            return {r.fingerprint: ipc.read_schema(py_buffer(r.arrow_schema)) for r in rows}

    # --- state transitions -----------------------------------------------------------------

    def quarantine(self, segment_id: int, problem: str) -> bool:
        """sealed/replicated → quarantined, noting `problem`; returns whether it moved (False
        when retention or an earlier check moved it first)."""
        return self._transition(
            [segment_id],
            (SegmentState.SEALED, SegmentState.REPLICATED),
            SegmentState.QUARANTINED,
            problem=problem,
        ) == [segment_id]

    def mark_replicated(self, segment_ids: Sequence[int], *, whole: bool = False) -> list[int]:
        """sealed → replicated, and each partition's replicated_offset past them, in one
        transaction: the copy is either recorded whole or not at all. `whole`: none moves
        unless every one is still sealed (a copy of segments that a consolidation replaced
        or a check quarantined meanwhile must not count for the others)."""
        if not segment_ids:
            return []
        try:
            return self._mark_replicated(segment_ids, whole)
        except _NotWholeError:
            return []

    def _mark_replicated(self, segment_ids: Sequence[int], whole: bool) -> list[int]:
        with self._write() as session:
            moved = _move(
                session,
                segment_ids,
                (SegmentState.SEALED,),
                SegmentState.REPLICATED,
                replicated_at=now_ms(),
            )
            if whole and len(moved) != len(set(segment_ids)):
                raise _NotWholeError  # rolls the moves back
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

    def mark_deleting(self, segment_ids: Sequence[int], at: int | None = None) -> list[int]:
        """sealed/replicated/quarantined → deleting (at epoch ms `at`); returns the ids moved."""
        return self._transition(
            segment_ids,
            (SegmentState.SEALED, SegmentState.REPLICATED, SegmentState.QUARANTINED),
            SegmentState.DELETING,
            deleting_at=now_ms() if at is None else at,
        )

    def remove(self, segment_ids: Sequence[int]) -> int:
        """Drop rows of segments already marked deleting (their files are gone)."""
        if not segment_ids:
            return 0
        with self._write() as session:
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

    def _transition(
        self,
        segment_ids: Sequence[int],
        from_states: Sequence[SegmentState],
        to_state: SegmentState,
        **values: Any,
    ) -> list[int]:
        if not segment_ids:
            return []
        with self._write() as session:
            return _move(session, segment_ids, from_states, to_state, **values)


def _move(
    session: Session,
    segment_ids: Sequence[int],
    from_states: Sequence[SegmentState],
    to_state: SegmentState,
    **values: Any,
) -> list[int]:
    """Inside a write transaction: the listed segments that are in `from_states` move to
    `to_state` (with `values`); returns their ids."""
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


def _record_partition(conn: Connection, commit: PartitionCommit, stamp: int) -> bool:
    topic, partition = commit.topic, commit.partition
    if commit.segments and already_recorded(conn, topic, partition, commit.segments[0].stats):
        return False
    for segment in commit.segments:
        stats = segment.stats
        advance_for_segment(conn, topic, partition, stats, stamp)
        insert_segment(conn, topic, partition, segment, stamp)
        remember_schema(conn, topic, stats.schema_fingerprint, segment.schema, stamp)
    if commit.advance_to is not None:
        advance_over(conn, topic, partition, commit.advance_to, stamp)
    produced.record_producers(conn, topic, partition, commit.producers, stamp)
    return True


class _NotWholeError(Exception):
    """mark_replicated(whole=True) found a segment no longer sealed."""
