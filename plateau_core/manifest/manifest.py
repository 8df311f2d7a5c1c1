"""The manifest: which segments exist, their spans, and each partition's watermark."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import IntegrityError

from plateau_core.errors import ManifestConflictError
from plateau_core.manifest import consumed, produced, swap, transitions, unserved
from plateau_core.manifest.commit import advance_over, record_partition
from plateau_core.manifest.models import (
    PartitionRow,
    SchemaRow,
    SegmentRow,
    SegmentState,
    StoreIdentityRow,
)
from plateau_core.manifest.partition_spans import partition_spans
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
                    recorded.append(record_partition(conn, commit, stamp))
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
        stamp = now_ms()
        with self._write() as session:
            unserved.record_unserved(
                session,
                topic,
                partition,
                path,
                state=SegmentState.QUARANTINED,
                problem=problem,
                start_offset=start_offset,
                end_offset=end_offset,
                size_bytes=size_bytes,
                stats=stats,
                stamp=stamp,
            )

    def record_retired(
        self, topic: str, partition: int, path: str, stats: SegmentStats, size_bytes: int
    ) -> None:
        """Record a consolidated segment's input file found beside it (rebuilding a manifest
        during the deletion grace) as retired, as the swap left it: retention removes it."""
        stamp = now_ms()
        with self._write() as session:
            unserved.record_unserved(
                session,
                topic,
                partition,
                path,
                state=SegmentState.DELETING,
                problem=None,
                start_offset=unserved.PLACEHOLDER_START,
                end_offset=stats.end_offset,
                size_bytes=size_bytes,
                stats=stats,
                stamp=stamp,
            )

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

    def produced_topic_origins(self) -> dict[str, str]:
        """Produced topics with what recorded them: `config`, `create_topics` or
        `produce` (auto-created; the last creator, when producers created a topic the config had
        listed before)."""
        with self._read() as session:
            return produced.produced_topic_origins(session)

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

    # --- the store's identity ----------------------------------------------------------------

    def store_id(self) -> str:
        """The store's id (given by migration 9 when the manifest got to it)."""
        with self._read() as session:
            return session.scalars(select(StoreIdentityRow.store_id)).one()

    def adopt_store_id(self, store_id: str) -> None:
        """Take `store_id` as the store's id: rebuild-manifest keeps the one the store had."""
        with self._write() as session:
            session.execute(delete(StoreIdentityRow))
            session.execute(insert(StoreIdentityRow).values(store_id=store_id, created_at=now_ms()))

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
            consumed.record_gap(session, topic, partition, from_offset, to_offset, now_ms())

    def source_topic(self, topic: str, partition: int) -> tuple[str, str] | None:
        """(Kafka topic, its topic id) recorded for a consumed partition, if any."""
        with self._read() as session:
            return consumed.source_topic(session, topic, partition)

    def consumed_topics(self) -> set[str]:
        """Topics with a Kafka source recorded for any of their partitions."""
        with self._read() as session:
            return consumed.consumed_topics(session)

    def record_source_topic(self, topic: str, partition: int, source: str, topic_id: str) -> None:
        """Record the Kafka topic (and its id) a consumed partition comes from now."""
        with self._write() as session:
            consumed.record_source_topic(session, topic, partition, source, topic_id, now_ms())

    def gaps(self, topic: str) -> list[tuple[int, int, int]]:
        """(partition, from_offset, to_offset) of every recorded gap of a topic."""
        with self._read() as session:
            return consumed.gaps(session, topic)

    def topics(self) -> list[str]:
        """Every topic with a watermark, sorted."""
        with self._read() as session:
            return list(session.scalars(select(PartitionRow.topic).distinct().order_by("topic")))

    def spans(self, topic: str | None = None) -> list[PartitionSpan]:
        """Each partition's watermark, replicated offset and what its readable segments
        cover, by topic and partition (`topic`: that topic's only)."""
        with self._read() as session:
            return partition_spans(session, topic)

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
            with self._write() as session:
                return transitions.mark_replicated(session, segment_ids, whole=whole)
        except transitions.NotWholeError:
            return []  # the moves were rolled back

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
            return transitions.remove(session, segment_ids)

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
            return transitions.move(session, segment_ids, from_states, to_state, **values)
