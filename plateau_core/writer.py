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

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import structlog

from plateau_core.admission import admit
from plateau_core.disk_floor import DiskFloor
from plateau_core.errors import (
    FlushTimeoutError,
    InvalidInputError,
    PlateauError,
)
from plateau_core.group_commit import GroupCommitter
from plateau_core.handle import StoreHandle
from plateau_core.journal import Journal
from plateau_core.listener import NoListener, TopicPartition, WriterListener, WriterStats, tell
from plateau_core.names import partition_dir, validate_topic
from plateau_core.partition_lock import PartitionLock
from plateau_core.policies import IndexPolicy, RollPolicy, WriterPolicy
from plateau_core.producers import ProducerBatch
from plateau_core.recovery import recover_partition
from plateau_core.rollup import RollupPolicy
from plateau_core.seal_groups import SealGroups, relieve_pressure
from plateau_core.sealing import CommitUnknownError, announce, log_failure, seal_group
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats
from plateau_core.slog import Append, Prepared, SealJob, SegmentLog, prepare

log = structlog.get_logger(__name__)

Logs = Iterable[SegmentLog]


class Writer:
    """Owns a set of partitions of a Store and turns their appends into sealed segments."""

    def __init__(
        self,
        store: StoreHandle,
        policy: WriterPolicy | None = None,
        listener: WriterListener | None = None,
        *,
        write: Callable[..., tuple[Path, SegmentStats]] = write_segment,
    ) -> None:
        self.store = store
        self.policy = policy or WriterPolicy()
        self.listener: WriterListener = listener or NoListener()
        self._write_segment = write  # tests inject failing or slow writers here
        self.journal: Journal | None = None  # see JournaledWriter
        self._cond = threading.Condition()
        self._logs: dict[TopicPartition, SegmentLog] = {}
        self._locks: dict[TopicPartition, PartitionLock] = {}
        # Partitions given up while a seal or a consolidation of theirs still ran: their
        # locks are released when that ends, never before (a next owner would recover the
        # folder under it: delete the file it is about to record, or have it renamed over
        # one of its own).
        self._lingering: dict[TopicPartition, PartitionLock] = {}
        self._sealing: set[TopicPartition] = set()  # partitions with a seal running
        self._maintained: set[TopicPartition] = set()  # see maintaining()
        self._buffered = 0
        self._in_flight = 0
        self._groups = SealGroups(self._logs, self.policy.seal_together)
        self._disk = DiskFloor(store.data_dir, self.policy.min_free_disk_bytes)
        self._pool = ThreadPoolExecutor(self.policy.writer_threads, thread_name_prefix="seal")
        self._committer = GroupCommitter(store.manifest)
        self._closed = False
        self._ticker = threading.Thread(target=self._tick_loop, name="slog-ticker", daemon=True)
        self._ticker.start()

    # --- ownership ---------------------------------------------------------------------------

    def acquire(
        self,
        topic: str,
        partition: int,
        *,
        roll: RollPolicy | None = None,
        index: IndexPolicy | None = None,
        rollups: tuple[RollupPolicy, ...] = (),
        timeout_s: float = 30.0,
    ) -> int | None:
        """Take ownership of a partition; returns its watermark (None if never written).

        `index` says which columns its segments keep bloom filters of; each of `rollups`
        is sealed with them into its derived topic.

        Waits up to `timeout_s` for another writer (a previous owner still flushing) to let
        go, then recovers the partition's folder against the manifest.

        Args:
            topic: The topic; its folder is created if missing.
            partition: The partition number.
            roll: When its buffer becomes a segment (default RollPolicy()).
            index: Bloom filters its segments keep (default: none).
            rollups: Aggregates sealed with its segments into derived topics.
            timeout_s: How long to wait for its lock.

        Returns:
            The offset the partition's appends start at or after (its watermark); None
            when nothing was ever written there.

        Raises:
            InvalidInputError: The topic name or partition number is not valid.
            PartitionLockedError: Another writer (process or handle) still holds it after
                `timeout_s`.
            PlateauError: This writer owns it already.
        """
        key = (validate_topic(topic), partition)
        with self._cond:
            if key in self._logs:
                raise PlateauError(f"{topic}[{partition}] is already acquired by this writer")
        directory = partition_dir(self.store.data_dir, topic, partition)
        lock = PartitionLock.acquire(directory, timeout_s, fsync=self.policy.fsync)
        try:
            watermark = recover_partition(self.store, topic, partition)
            # A roll-up partition is written only with its raw partition, under this lock:
            # a seal that crashed may have left a roll-up file no manifest row names.
            for rollup in rollups:
                recover_partition(self.store, rollup.derived_topic(topic), partition)
        except BaseException:
            lock.release()
            raise
        slog = SegmentLog(
            topic,
            partition,
            directory,
            roll or RollPolicy(),
            watermark,
            index=index,
            rollups=rollups,
        )
        with self._cond:
            self._logs[key] = slog
            self._locks[key] = lock
        log.info("partition_acquired", topic=topic, partition=partition, next_offset=watermark)
        return watermark

    def release(
        self, topic: str, partition: int, *, seal: bool = True, timeout_s: float = 30.0
    ) -> None:
        """Give a partition up: seal what is buffered first (revoke) or drop it (lost).

        A partition not owned here is left alone. When a seal of it is still running after
        `timeout_s`, its lock is kept until that seal ends, so a next owner waits in
        `acquire` rather than recovering the folder under it.

        Args:
            seal: Seal the buffer first; False drops it (a lost partition: its next owner
                goes on from the watermark).
            timeout_s: How long to wait for that seal, then for a seal already running.

        Raises:
            FlushTimeoutError: With `seal`, the buffer was not sealed in time; the
                partition stays owned, its records buffered.
        """
        key = (topic, partition)
        if seal:
            self.flush([key], timeout_s=timeout_s)
        with self._cond:
            slog = self._logs.get(key)
            if slog is None:
                return
            dropped_rows = slog.rows
            # Before the wait: the seal in flight may fail, and what it held is dropped too.
            self._dropping(slog)
            self._buffered -= slog.drop()
            deadline = time.monotonic() + timeout_s
            # A seal already running may still land, and a consolidation may be swapping
            # files: wait so the next owner's recovery sees where they end.
            while (
                slog.in_flight is not None or key in self._maintained
            ) and time.monotonic() < deadline:
                self._cond.wait(0.05)
            if slog.in_flight is not None:
                dropped_rows += slog.in_flight.rows
            # A seal that failed meanwhile put its records back in the buffer.
            dropped_rows += slog.rows
            self._buffered -= slog.drop()
            del self._logs[key]
            lock = self._locks.pop(key)
            for other in self._logs.values():
                other.links.discard(key)
            busy = slog.in_flight is not None or key in self._maintained
            if busy:
                self._lingering[key] = lock
            self._cond.notify_all()
        if not busy:
            lock.release()
        log.info(
            "partition_released",
            topic=topic,
            partition=partition,
            last_offset=slog.last_offset,
            dropped_rows=dropped_rows,
            lock_kept_until_seal_ends=busy,
        )
        tell(self.listener.on_capacity)

    @contextlib.contextmanager
    def maintaining(self, topic: str, partition: int) -> Iterator[bool]:
        """Hold an owned partition while other work rewrites sealed files in its folder
        (consolidation): releasing it waits until this ends, so a next owner never recovers
        the folder halfway. Yields False, holding nothing, for a partition not owned here or
        held already."""
        key = (topic, partition)
        with self._cond:
            held = key in self._logs and key not in self._maintained
            if held:
                self._maintained.add(key)
        try:
            yield held
        finally:
            if held:
                with self._cond:
                    self._maintained.discard(key)
                    self._cond.notify_all()
                self._let_go_if_done(key)

    def _let_go_if_done(self, key: TopicPartition) -> None:
        """Release the lock of a partition given up while busy, once nothing of it runs."""
        with self._cond:
            lock = self._lingering.get(key)
            if lock is None or key in self._maintained or key in self._sealing:
                return
            del self._lingering[key]
        lock.release()
        log.info("partition_lock_released", topic=key[0], partition=key[1])

    def owned(self) -> list[TopicPartition]:
        """The partitions this writer owns, sorted."""
        with self._cond:
            return sorted(self._logs)

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
        prepared = [[prepare(item) for item in a.batches if item.num_rows] for a in appends]
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

    # --- sealing -----------------------------------------------------------------------------

    def flush(
        self, partitions: Iterable[TopicPartition] | None = None, *, timeout_s: float = 30.0
    ) -> None:
        """Seal everything buffered now for these partitions (all owned ones by default).

        Returns once all of it is recorded in the manifest and the listener was told.
        Partitions not owned here are passed over. A seal that fails is retried, with
        backoff, until the deadline.

        Raises:
            FlushTimeoutError: Some partitions were still unsealed at the deadline (its
                `pending` names them); their records stay buffered and are sealed later.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            keys = list(self._logs) if partitions is None else [tuple(k) for k in partitions]
            targets = [self._logs[k] for k in keys if k in self._logs]
            for slog in targets:
                # A flush is an explicit request: try now even inside a retry backoff.
                slog.retry_at = None
            while True:
                self._start([s for s in targets if s.can_seal(time.monotonic())])
                pending = [s for s in targets if s.pending() or s.in_flight is not None]
                if not pending:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FlushTimeoutError([(s.topic, s.partition) for s in pending], timeout_s)
                self._cond.wait(min(remaining, self._groups.wait_s(0.05)))

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

    # A group's partitions seal in one manifest transaction; a journal gives that atomicity
    # instead (it keeps a group until every part of it is sealed, and replays the rest).
    _link_groups = True

    def _held(self) -> int:
        """Bytes buffered or being sealed: what the memory budget bounds."""
        return self._buffered + self._in_flight

    # What a JournaledWriter does when a group is buffered (its journal number, None here),
    # a buffer dropped unsealed, a group sealed (without the lock) and the writer closed.
    def _journal(
        self, appends: Sequence[Append], batches: Sequence[Sequence[Prepared]], changed: Logs
    ) -> int | None: ...
    def _dropping(self, slog: SegmentLog) -> None: ...
    def _early(self, now: float) -> list[SegmentLog]:
        return []  # partitions to seal before their roll says so

    def _sealable(self, slog: SegmentLog) -> bool:
        return True

    def _sealed_group(self) -> None: ...
    def _stopped(self) -> None: ...

    def _owned(self, topic: str, partition: int) -> SegmentLog:
        slog = self._logs.get((topic, partition))
        if slog is None:
            raise InvalidInputError(f"{topic}[{partition}] is not acquired by this writer")
        return slog

    def seal_due(self) -> None:
        """Start the seals that are due now. With `seal_together` appends do not start
        seals themselves: a caller landing many partitions' records at once (one produce
        request) calls this after the last, so they seal as one group; the ticker does it
        every `tick_s` otherwise."""
        with self._cond:
            self._groups.hold.arrived()
            self._schedule()

    def _schedule(self, candidates: Iterable[SegmentLog] | None = None) -> None:
        """Start the seals of the partitions that are due (among `candidates`; all of them
        when sealing together, so one group commit takes every partition that is due)."""
        pool = (
            self._logs.values() if candidates is None or self.policy.seal_together else candidates
        )
        now = time.monotonic()
        self._start([s for s in pool if s.due(now)] + self._early(now))

    def _start(self, selected: list[SegmentLog]) -> None:
        for group in self._groups.form(selected):
            jobs = [self._take(m) for m in group if m.pending() and self._sealable(m)]
            if jobs:
                self._groups.in_flight += 1
                self._pool.submit(self._seal, jobs)

    def _take(self, slog: SegmentLog) -> SealJob:
        job = slog.take()
        self._sealing.add(slog.key)
        self._buffered -= job.nbytes
        self._in_flight += job.nbytes
        return job

    def _seal(self, group: list[SealJob]) -> None:
        """Runs on a pool thread, without the lock."""
        began = time.monotonic()
        try:
            sealed = seal_group(
                group,
                self.store.data_dir,
                self.policy,
                self._write_segment,
                self._committer,
            )
        except Exception as exc:  # any failure keeps the data buffered for a retry
            self._failed(group, exc)
            return
        # Before the seal counts as finished, so a flush() that returns has told the listener.
        for one in sealed:
            announce(one, self.listener)
        with self._cond:
            self._groups.in_flight -= 1
            self._groups.after(group, self.policy.group_hold_s, time.monotonic() - began)
            for job in group:
                self._in_flight -= job.nbytes
                self._sealing.discard(job.key)
                slog = self._logs.get(job.key)
                if slog is not None:
                    slog.sealed()
            self._schedule()
            self._cond.notify_all()
        for job in group:
            self._let_go_if_done(job.key)
        self._sealed_group()
        tell(self.listener.on_capacity)

    def _failed(self, group: list[SealJob], exc: Exception) -> None:
        keys = {job.key for job in group}
        with self._cond:
            self._groups.in_flight -= 1
            delays: list[float] = []
            for job in group:
                self._in_flight -= job.nbytes
                self._sealing.discard(job.key)
                slog = self._logs.get(job.key)
                delay = 0.0
                if slog is not None:
                    self._buffered += job.nbytes
                    unknown = isinstance(exc, CommitUnknownError) or job.exact
                    keep = slog.hold_exact if unknown else slog.restore
                    delay = keep(job, str(exc), self.policy.retry_backoff_s, time.monotonic())
                    if self._link_groups:  # still one group: it must land together
                        slog.links.update(keys - {job.key})
                delays.append(delay)
            self._cond.notify_all()
        for job in group:
            self._let_go_if_done(job.key)
        for job, delay in zip(group, delays, strict=True):
            log_failure(job, exc, delay)
            tell(self.listener.on_seal_failed, job.topic, job.partition, exc)

    def _tick_loop(self) -> None:
        while not self._closed:
            with self._cond:
                self._schedule()
                self._cond.wait(self._groups.wait_s(self.policy.tick_s))
