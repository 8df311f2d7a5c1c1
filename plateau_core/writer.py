"""The Writer: buffers appends per partition and seals them on a bounded thread pool.

Commit order per seal (the contract the bridge relies on): segment files written to temp
names, fsynced, renamed to `{start_offset:020d}.arrow`, directory fsynced; then one manifest
transaction records the segments and advances the watermark; only then is the listener told
(`on_sealed`), which is when the bridge may commit `end_offset` to Kafka.

Records appended together by `append_group` (a batch and its dead letters, say) are sealed
together: their partitions' seals are one manifest transaction, so a crash keeps all of them
or none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pyarrow as pa

from plateau_core.admission import admit
from plateau_core.disk_floor import DiskFloor
from plateau_core.errors import InvalidInputError
from plateau_core.handle import StoreHandle
from plateau_core.journal import Journal
from plateau_core.listener import NoListener, TopicPartition, WriterListener, WriterStats
from plateau_core.ownership import PartitionOwner
from plateau_core.policies import WriterPolicy
from plateau_core.producers import ProducerBatch
from plateau_core.seal_groups import relieve_pressure
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats
from plateau_core.slog import Append, Prepared, SegmentLog, prepare
from plateau_core.stored_names import TwinFieldsError

Logs = Iterable[SegmentLog]


class Writer(PartitionOwner):
    """Owns a set of partitions of a Store and turns their appends into sealed segments.

    Taking and giving up partitions is plateau_core.ownership's part of it; running the
    seals, plateau_core.seal_pool's."""

    def __init__(
        self,
        store: StoreHandle,
        policy: WriterPolicy | None = None,
        listener: WriterListener | None = None,
        *,
        write: Callable[..., tuple[Path, SegmentStats]] = write_segment,
    ) -> None:
        policy = policy or WriterPolicy()
        self.journal: Journal | None = None  # see JournaledWriter
        self._disk = DiskFloor(store.data_dir, policy.min_free_disk_bytes)
        super().__init__(store, policy, listener or NoListener(), write)
        self._ticker.start()

    # --- appends -----------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        partition: int,
        batch: pa.RecordBatch,
        *,
        producer: ProducerBatch | None = None,
        urgent: bool = False,
    ) -> None:
        """Buffer a batch, or raise before changing anything.

        `producer` says which idempotent producer's batch this is; the manifest records it
        with the segment that holds these records. `urgent`: someone waits until these
        records are durable, so the partition seals as soon as no seal of it is in flight
        (records arriving meanwhile join the next seal: a group commit).

        Raises:
            BackpressureError: Refused for now (its `reason` says why): pause the partition
                and retry the same batch once `accepting()` is true again.
            InvalidInputError: The batch itself is wrong (the message names the field), its
                offsets do not follow those already accepted, or the partition is not
                acquired by this writer.
        """
        self.append_group([Append(topic, partition, (batch,), producer, urgent=urgent)])

    def skip(self, topic: str, partition: int, next_offset: int) -> None:
        """Offsets below `next_offset` not appended were handled elsewhere (skipped, sent to
        a dead-letter topic). The watermark moves over them with the partition's next seal
        (at once when nothing is buffered), so a restart does not read them again.

        Never refused for backpressure. The listener's `on_advanced` says when the move is
        recorded.

        Raises:
            InvalidInputError: `next_offset` is not an offset, or the partition is not
                acquired by this writer.
        """
        self.append_group([Append(topic, partition, advance_to=next_offset)])

    def append_group(self, appends: Sequence[Append], *, journal: bool = True) -> int | None:
        """Buffer appends to one or more partitions that must become durable together: all
        of them are recorded in one manifest transaction, or none. Raises before changing
        anything (BackpressureError, InvalidInputError), as `append` does.

        A JournaledWriter returns the group's number in its journal: the listener's
        `on_journaled` says when it is durable. `journal=False`: a replay of the journal.

        Returns:
            The group's journal number; None without a journal (or with `journal=False`).
        """
        prepared = [_prepared(a) for a in appends]
        nbytes = sum(p.nbytes for batches in prepared for p in batches)
        with self._cond:
            slogs = [self._owned(a.topic, a.partition) for a in appends]
            refused = admit(
                appends,
                slogs,
                prepared,
                nbytes,
                # A replay (journal=False) is not held back by the disk floor: refused, a
                # restart on a full disk could never turn its journal into segments.
                disk=self._disk if journal else None,
                held=self._held(),
                budget=self.policy.memory_budget_bytes,
            )
            if refused is not None:
                self._start(
                    relieve_pressure(
                        self._logs.values(), self._buffered, self.policy.memory_budget_bytes
                    )
                )
                raise refused
            now = time.monotonic()
            changed: dict[TopicPartition, SegmentLog] = {}
            for append, slog, batches in zip(appends, slogs, prepared, strict=True):
                for batch in batches:
                    slog.add(batch, now)
                    changed[slog.key] = slog
                if append.producer is not None:
                    slog.producers.append(append.producer)
                    changed[slog.key] = slog
                if append.advance_to is not None and slog.advance(append.advance_to):
                    changed[slog.key] = slog
                slog.urgent = slog.urgent or (append.urgent and slog.key in changed)
            self._buffered += nbytes
            if len(changed) > 1 and self._link_groups:
                for slog in changed.values():
                    slog.links.update(k for k in changed if k != slog.key)
            # Under the lock: a journal holds each partition's groups in buffer order.
            seq = self._journal(appends, prepared, changed.values()) if journal else None
            if not self.policy.seal_together:
                self._schedule(changed.values())
            else:
                self._touched.update(changed)  # seal_due looks at them
        return seq

    def next_offset(self, topic: str, partition: int) -> int:
        """The offset an append to this owned partition must start at or after.

        Raises:
            InvalidInputError: The partition is not acquired by this writer.
        """
        with self._cond:
            last = self._owned(topic, partition).last_offset
        return 0 if last is None else last + 1

    def accepting(self, topic: str, partition: int) -> bool:
        """Whether an append to this partition would likely be accepted now (False for a
        partition not owned here)."""
        with self._cond:
            slog = self._logs.get((topic, partition))
            if slog is None:
                return False
            if slog.in_flight is not None and slog.full():
                return False
            total = self._held()
            # The same test append() makes, for the batch it refused last (if any).
            if total > 0 and total + max(1, slog.refused_nbytes) > self.policy.memory_budget_bytes:
                return False
        return not self._disk.low()

    # --- closing and stats -------------------------------------------------------------------

    def close(self, *, timeout_s: float = 30.0) -> None:
        """Seal what is buffered, release every partition, stop the threads. A second
        call does nothing.

        Raises:
            FlushTimeoutError: Not everything was sealed within `timeout_s`. The writer is
                closed all the same: what was not sealed is dropped (unacknowledged, so read
                again from the source; a journal keeps it for its replay).
        """
        if self._closed:
            return
        try:
            self.flush(timeout_s=timeout_s)
        finally:
            for topic, partition in self.owned():
                self.release(topic, partition, seal=False, timeout_s=timeout_s)
            self._closed = True
            with self._cond:
                self._cond.notify_all()
            self._ticker.join(timeout=5)
            self._pool.shutdown(wait=True)
            self._committer.close()
            self._stopped()

    def unsealed_since(self) -> dict[TopicPartition, float]:
        """Per owned partition holding unsealed records: when the oldest was buffered
        (time.monotonic()). Its age is how far queries trail ingestion there."""
        with self._cond:
            found = {key: slog.unsealed_since() for key, slog in self._logs.items()}
        return {key: since for key, since in found.items() if since is not None}

    def stats(self) -> WriterStats:
        """Buffered and in-flight bytes and rows, seals running, and the partitions whose
        last seal failed (with its error), now."""
        with self._cond:
            return WriterStats(
                partitions=len(self._logs),
                buffered_bytes=self._buffered,
                in_flight_bytes=self._in_flight,
                buffered_rows=sum(s.rows for s in self._logs.values()),
                seals_in_flight=sum(1 for s in self._logs.values() if s.in_flight),
                failing={k: s.last_error for k, s in self._logs.items() if s.last_error},
            )

    # --- internals (callers hold self._cond unless said otherwise) ---------------------------

    def _held(self) -> int:
        """Bytes buffered or being sealed: what the memory budget bounds."""
        return self._buffered + self._in_flight

    # What a JournaledWriter does when a group is buffered (its journal number, None here)
    # and when the writer closed.
    def _journal(
        self, appends: Sequence[Append], batches: Sequence[Sequence[Prepared]], changed: Logs
    ) -> int | None: ...
    def _stopped(self) -> None: ...

    def _owned(self, topic: str, partition: int) -> SegmentLog:
        slog = self._logs.get((topic, partition))
        if slog is None:
            raise InvalidInputError(f"{topic}[{partition}] is not acquired by this writer")
        return slog


def _prepared(append: Append) -> list[Prepared]:
    """`append`'s batches prepared for their segment; a batch holding a column and its
    suffixed twin is refused naming where it was appended."""
    try:
        return [prepare(item) for item in append.batches if item.num_rows]
    except TwinFieldsError as exc:
        raise exc.at(
            f"a batch appended to topic {append.topic!r} partition {append.partition}"
        ) from None
