"""Taking partitions and giving them up: a writer holds each partition it owns by a lock on
its folder (plateau_core.partition_lock), recovers the folder against the manifest when it
takes it, and seals or drops its buffer when it gives it up. A partition given up while a
seal or a consolidation of it still runs keeps its lock until that ends."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from plateau_core.errors import InvalidInputError, PlateauError
from plateau_core.handle import StoreHandle
from plateau_core.listener import TopicPartition, WriterListener, tell
from plateau_core.names import partition_dir, validate_topic
from plateau_core.partition_lock import PartitionLock
from plateau_core.policies import IndexPolicy, RollPolicy, WriterPolicy
from plateau_core.recovery import recover_partition
from plateau_core.rollup import RollupPolicy
from plateau_core.seal_pool import SealPool
from plateau_core.segment_stats import SegmentStats
from plateau_core.slog import SegmentLog

log = structlog.get_logger(__name__)


class PartitionOwner(SealPool):
    """The partitions a writer owns, their locks, and the locks it keeps past giving one up."""

    def __init__(
        self,
        store: StoreHandle,
        policy: WriterPolicy,
        listener: WriterListener,
        write: Callable[..., tuple[Path, SegmentStats]],
    ) -> None:
        self._locks: dict[TopicPartition, PartitionLock] = {}
        # Partitions given up while a seal or a consolidation of theirs still ran: their
        # locks are released when that ends, never before (a next owner would recover the
        # folder under it: delete the file it is about to record, or have it renamed over
        # one of its own).
        self._lingering: dict[TopicPartition, PartitionLock] = {}
        self._maintained: set[TopicPartition] = set()  # see maintaining()
        super().__init__(store, policy, listener, write)

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
            InvalidInputError: The topic name or partition number is not valid, or two
                of `rollups` have one granularity (one derived topic).
            PartitionLockedError: Another writer (process or handle) still holds it after
                `timeout_s`.
            PlateauError: This writer owns it already.
        """
        key = (validate_topic(topic), partition)
        derived = [rollup.derived_topic(topic) for rollup in rollups]
        if len(set(derived)) != len(derived):
            # Both would seal into one derived partition at the same offsets: every seal of
            # the partition conflicted with itself.
            twice = sorted({d for d in derived if derived.count(d) > 1})
            raise InvalidInputError(
                f"{topic}: two rollups of one granularity seal into {', '.join(twice)}; give "
                "each rollup of a topic its own granularity"
            )
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

    # What a JournaledWriter does when a buffer is dropped unsealed (callers hold the lock).
    def _dropping(self, slog: SegmentLog) -> None: ...
