"""The Writer: buffers appends per partition and seals them on a bounded thread pool.

Commit order per seal (the contract the bridge relies on): segment file written to a temp
name, fsynced, renamed to `{start_offset:020d}.arrow`, directory fsynced; then one manifest
transaction records the segment and advances the watermark; only then is the listener told
(`on_sealed`), which is when the bridge may commit `end_offset` to Kafka.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import structlog

from plateau_core.errors import (
    BackpressureError,
    FlushTimeoutError,
    InvalidInputError,
    ManifestConflictError,
    PlateauError,
)
from plateau_core.group_commit import GroupCommitter
from plateau_core.handle import StoreHandle
from plateau_core.listener import SealedSegment, TopicPartition, WriterListener, WriterStats
from plateau_core.manifest.records import SegmentCommit
from plateau_core.names import partition_dir, relative_segment_path, validate_topic
from plateau_core.partition_lock import PartitionLock
from plateau_core.policies import RollPolicy, WriterPolicy
from plateau_core.producers import ProducerBatch
from plateau_core.recovery import recover_partition
from plateau_core.schema import fingerprint, normalize_batch
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats
from plateau_core.slog import SealJob, SegmentLog

log = structlog.get_logger(__name__)


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
        self.listener = listener or WriterListener()
        self._write_segment = write  # tests inject failing or slow writers here
        self._cond = threading.Condition()
        self._logs: dict[TopicPartition, SegmentLog] = {}
        self._locks: dict[TopicPartition, PartitionLock] = {}
        self._buffered = 0
        self._in_flight = 0
        self._fingerprints: dict[pa.Schema, str] = {}
        self._disk_free: tuple[float, int] = (0.0, 0)
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
        timeout_s: float = 30.0,
    ) -> int | None:
        """Take ownership of a partition; returns its watermark (None if never written).

        Waits up to `timeout_s` for another writer (a previous owner still flushing) to let
        go, then recovers the partition's folder against the manifest.
        """
        key = (validate_topic(topic), partition)
        with self._cond:
            if key in self._logs:
                raise PlateauError(f"{topic}[{partition}] is already acquired by this writer")
        directory = partition_dir(self.store.data_dir, topic, partition)
        lock = PartitionLock.acquire(directory, timeout_s)
        try:
            watermark = recover_partition(self.store, topic, partition)
        except BaseException:
            lock.release()
            raise
        slog = SegmentLog(topic, partition, directory, roll or RollPolicy(), watermark)
        with self._cond:
            self._logs[key] = slog
            self._locks[key] = lock
        log.info("partition_acquired", topic=topic, partition=partition, next_offset=watermark)
        return watermark

    def release(
        self, topic: str, partition: int, *, seal: bool = True, timeout_s: float = 30.0
    ) -> None:
        """Give a partition up: seal what is buffered first (revoke) or drop it (lost)."""
        key = (topic, partition)
        if seal:
            self.flush([key], timeout_s=timeout_s)
        with self._cond:
            slog = self._logs.get(key)
            if slog is None:
                return
            dropped_rows = slog.rows
            self._buffered -= slog.drop()
            deadline = time.monotonic() + timeout_s
            # A seal already running may still land; wait so the next owner sees it.
            while slog.in_flight is not None and time.monotonic() < deadline:
                self._cond.wait(0.05)
            del self._logs[key]
            lock = self._locks.pop(key)
            self._cond.notify_all()
        lock.release()
        log.info(
            "partition_released",
            topic=topic,
            partition=partition,
            last_offset=slog.last_offset,
            dropped_rows=dropped_rows,
        )
        self.listener.on_capacity()

    def owned(self) -> list[TopicPartition]:
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

        BackpressureError: pause the partition and retry once `accepting()` is true again.
        InvalidInputError: the batch itself is wrong (the message names the field).
        """
        normalized = normalize_batch(batch)
        schema_id = self._fingerprint(normalized.schema)
        nbytes = normalized.nbytes
        start: list[SealJob] = []
        with self._cond:
            slog = self._owned(topic, partition)
            slog.check_offsets(normalized)
            self._check_disk(topic, partition)
            busy = slog.busy_reason(schema_id)
            if busy is not None:
                raise BackpressureError(topic, partition, "partition_busy", busy)
            total = self._buffered + self._in_flight
            if total > 0 and total + nbytes > self.policy.memory_budget_bytes:
                start.extend(self._relieve_pressure())
                self._submit(start)
                slog.refused_nbytes = nbytes  # accepting() waits for room for this batch
                raise BackpressureError(
                    topic,
                    partition,
                    "memory_budget",
                    f"{total} bytes buffered or being written, budget "
                    f"{self.policy.memory_budget_bytes}, batch {nbytes}",
                )
            slog.refused_nbytes = 0
            now = time.monotonic()
            if slog.fingerprint is not None and slog.fingerprint != schema_id:
                start.append(self._take(slog))  # schema change: the old schema rolls first
            slog.add(normalized, schema_id, now, producer)
            slog.urgent = slog.urgent or urgent
            self._buffered += nbytes
            if slog.due(now):
                start.append(self._take(slog))
            self._submit(start)

    def skip(self, topic: str, partition: int, next_offset: int) -> None:
        """Offsets below `next_offset` not appended were handled elsewhere (skipped, sent to
        a dead-letter topic). The watermark moves over them once everything before them is
        sealed, so a restart does not read them again."""
        with self._cond:
            slog = self._owned(topic, partition)
            if slog.last_offset is not None and next_offset <= slog.last_offset + 1:
                return
            slog.last_offset = next_offset - 1
            slog.pending_advance = next_offset
            due = slog.advance_due()
            if due is not None:
                self._advance(slog, due)
        if due is not None:
            self._advanced(slog, due)

    def _advance(self, slog: SegmentLog, next_offset: int) -> None:
        """Move the watermark; the caller then calls _advanced (outside the lock)."""
        self.store.manifest.advance_watermark(slog.topic, slog.partition, next_offset)
        if slog.pending_advance == next_offset:
            slog.pending_advance = None

    def _advanced(self, slog: SegmentLog, next_offset: int) -> None:
        log.info(
            "watermark_advanced",
            topic=slog.topic,
            partition=slog.partition,
            next_offset=next_offset,
            reason="skipped records",
        )
        self.listener.on_advanced(slog.topic, slog.partition, next_offset)

    def accepting(self, topic: str, partition: int) -> bool:
        """Whether an append to this partition would likely be accepted now."""
        with self._cond:
            slog = self._logs.get((topic, partition))
            if slog is None:
                return False
            if slog.in_flight is not None and slog.full():
                return False
            total = self._buffered + self._in_flight
            # The same test append() makes, for the batch it refused last (if any).
            if total > 0 and total + max(1, slog.refused_nbytes) > self.policy.memory_budget_bytes:
                return False
        return not self._disk_low()

    # --- sealing -----------------------------------------------------------------------------

    def flush(
        self, partitions: Iterable[TopicPartition] | None = None, *, timeout_s: float = 30.0
    ) -> None:
        """Seal everything buffered now for these partitions (all owned ones by default).

        Returns once all of it is recorded in the manifest; raises FlushTimeoutError
        naming the partitions still unsealed at the deadline.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            keys = list(self._logs) if partitions is None else [tuple(k) for k in partitions]
            targets = [self._logs[k] for k in keys if k in self._logs]
            for slog in targets:
                # A flush is an explicit request: try now even inside a retry backoff.
                slog.retry_at = None
            self._submit([self._take(s) for s in targets if s.can_seal(time.monotonic())])
            while True:
                pending = [s for s in targets if s.batches or s.in_flight is not None]
                if not pending:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FlushTimeoutError([(s.topic, s.partition) for s in pending], timeout_s)
                self._cond.wait(min(remaining, 0.05))
                self._submit([self._take(s) for s in pending if s.can_seal(time.monotonic())])

    def close(self, *, timeout_s: float = 30.0) -> None:
        """Seal what is buffered, release every partition, stop the threads."""
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

    def unsealed_since(self) -> dict[TopicPartition, float]:
        """Per owned partition holding unsealed records: when the oldest was buffered
        (time.monotonic()). Its age is how far queries trail ingestion there."""
        with self._cond:
            found = {key: slog.unsealed_since() for key, slog in self._logs.items()}
        return {key: since for key, since in found.items() if since is not None}

    def stats(self) -> WriterStats:
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

    def _owned(self, topic: str, partition: int) -> SegmentLog:
        slog = self._logs.get((topic, partition))
        if slog is None:
            raise InvalidInputError(f"{topic}[{partition}] is not acquired by this writer")
        return slog

    def _fingerprint(self, schema: pa.Schema) -> str:
        found = self._fingerprints.get(schema)
        if found is None:
            found = fingerprint(schema)
            if len(self._fingerprints) > 1024:
                self._fingerprints.clear()
            self._fingerprints[schema] = found
        return found

    def _take(self, slog: SegmentLog) -> SealJob:
        job = slog.take()
        self._buffered -= job.nbytes
        self._in_flight += job.nbytes
        return job

    def _submit(self, jobs: list[SealJob]) -> None:
        for job in jobs:
            self._pool.submit(self._seal, job)

    def _relieve_pressure(self) -> list[SealJob]:
        """Under memory pressure seal the biggest idle buffers instead of waiting for a roll."""
        now = time.monotonic()
        idle = sorted((s for s in self._logs.values() if s.can_seal(now)), key=lambda s: -s.nbytes)
        jobs: list[SealJob] = []
        for slog in idle:
            jobs.append(self._take(slog))
            if self._buffered < self.policy.memory_budget_bytes // 4:
                break
        return jobs

    def _check_disk(self, topic: str, partition: int) -> None:
        if self._disk_low():
            raise BackpressureError(
                topic,
                partition,
                "disk_full",
                f"free disk {self._disk_free[1]} bytes is below min_free_disk "
                f"{self.policy.min_free_disk_bytes}",
            )

    def _disk_low(self) -> bool:
        floor = self.policy.min_free_disk_bytes
        if floor <= 0:
            return False
        checked_at, free = self._disk_free
        now = time.monotonic()
        if now - checked_at > 1.0:
            free = shutil.disk_usage(self.store.data_dir).free
            self._disk_free = (now, free)
        return free < floor

    def _seal(self, job: SealJob) -> None:
        """Runs on a pool thread, without the lock."""
        topic, partition = job.topic, job.partition
        try:
            table = pa.Table.from_batches(job.batches)
            directory = partition_dir(self.store.data_dir, topic, partition)
            path, stats = self._write_segment(
                directory, table, self.policy.compression, fsync=self.policy.fsync
            )
            self._record(job, path, stats, table.schema)
        except Exception as exc:  # any failure keeps the data buffered for a retry
            self._failed(job, exc)
            return
        seconds = time.monotonic() - job.started
        sealed = SealedSegment(
            topic=topic,
            partition=partition,
            start_offset=stats.start_offset,
            end_offset=stats.end_offset,
            record_count=stats.record_count,
            size_bytes=stats.size_bytes,
            path=path,
            seconds=seconds,
        )
        log.info(
            "segment_sealed",
            topic=topic,
            partition=partition,
            start_offset=stats.start_offset,
            end_offset=stats.end_offset,
            records=stats.record_count,
            bytes=stats.size_bytes,
            seconds=round(seconds, 4),
        )
        # Before the seal counts as finished, so a flush() that returns has told the listener.
        self.listener.on_sealed(sealed)
        with self._cond:
            slog = self._logs.get((topic, partition))
            self._in_flight -= job.nbytes
            follow: list[SealJob] = []
            advance = None
            if slog is not None:
                slog.sealed()
                advance = slog.advance_due()
                if advance is not None:
                    # Under the lock (a rare path): a flush that returns has seen it.
                    self._advance(slog, advance)
                if slog.due(time.monotonic()):
                    follow.append(self._take(slog))
            self._submit(follow)
            self._cond.notify_all()
        if slog is not None and advance is not None:
            self._advanced(slog, advance)
        self.listener.on_capacity()

    def _record(self, job: SealJob, path: Path, stats: SegmentStats, schema: pa.Schema) -> None:
        relative = relative_segment_path(job.topic, job.partition, stats.start_offset)
        commit = SegmentCommit(
            job.topic, job.partition, stats, relative, schema, tuple(job.producers)
        )
        try:
            self._committer.commit(commit)
        except ManifestConflictError:
            raise
        except Exception:
            # Only a definite failure makes the file an orphan; if the row did land (the
            # error came after the commit), the seal succeeded.
            if self.store.manifest.has_segment(job.topic, job.partition, stats):
                return
            path.unlink(missing_ok=True)
            raise

    def _failed(self, job: SealJob, exc: Exception) -> None:
        with self._cond:
            self._in_flight -= job.nbytes
            slog = self._logs.get((job.topic, job.partition))
            delay = 0.0
            if slog is not None:
                self._buffered += job.nbytes
                delay = slog.restore(job, str(exc), self.policy.retry_backoff_s, time.monotonic())
            self._cond.notify_all()
        first = job.batches[0].column("offset")[0].as_py()
        last = job.batches[-1].column("offset")[-1].as_py()
        log.error(
            "seal_failed",
            topic=job.topic,
            partition=job.partition,
            start_offset=first,
            last_offset=last,
            records=job.rows,
            error=str(exc),
            error_type=type(exc).__name__,
            retry_in_s=round(delay, 2),
        )
        self.listener.on_seal_failed(job.topic, job.partition, exc)

    def _tick_loop(self) -> None:
        while not self._closed:
            with self._cond:
                now = time.monotonic()
                self._submit([self._take(s) for s in self._logs.values() if s.due(now)])
                self._cond.wait(self.policy.tick_s)
