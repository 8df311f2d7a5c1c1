"""Consolidation: runs of small sealed segments of one partition merged into larger ones.

A short `roll.max_age` leaves many small segments; each costs a file to open and a manifest
row to plan over. A run of neighbouring segments (same state, same schema, each older than
`min_age`, together at most `target_bytes`) is rewritten as one segment holding exactly
their rows, then swapped in by one manifest transaction (Manifest.swap_segments):

1. the run's rows are read (every batch checked against its checksums) and written as one
   file, `{start}-{end}.arrow` (temp, fsync, rename), with the topic's bloom filters;
2. one transaction retires the run's rows (deleting) and records the new one in their state;
3. retention removes the retired files after its deletion grace, so reads planned before the
   swap still find them.

A crash before step 2 commits leaves the old set and an unrecorded file that recovery
removes as an orphan; after it, the new set, with the old files removed by retention later.
Offsets, the watermark and replication state do not change. A partition is consolidated only
while nothing else writes it: under its writer's `maintaining` guard, or its lock.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import structlog

from plateau_core.adaptive_compression import AdaptiveCompression
from plateau_core.background import BackgroundTask
from plateau_core.errors import ManifestConflictError, PartitionLockedError
from plateau_core.handle import StoreHandle
from plateau_core.manifest import SegmentRecord, SegmentState, now_ms
from plateau_core.manifest.records import SegmentFile
from plateau_core.names import consolidated_name, partition_dir
from plateau_core.pace import Pace
from plateau_core.partition_lock import PartitionLock
from plateau_core.policies import Compression, ConsolidatePolicy, IndexPolicy
from plateau_core.quarantine import quarantine
from plateau_core.read_request import ReadRequest
from plateau_core.reader import (
    ScanCounters,
    SegmentCorruptError,
    SegmentUnavailableError,
    segment_batches,
)
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats

log = structlog.get_logger(__name__)

WriteSegment = Callable[..., tuple[Path, SegmentStats]]
# Holds a partition against writes and recovery for the duration of one merge; yields
# whether the partition may be consolidated now (Writer.maintaining is one).
Guard = Callable[[str, int], contextlib.AbstractContextManager[bool]]


@dataclass(frozen=True)
class Merge:
    """One run of segments replaced by one segment holding offsets [start, end)."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    segments: int  # replaced by one
    bytes_before: int
    bytes_after: int


@dataclass
class ConsolidationReport:
    """What one consolidation pass did."""

    merged: list[Merge] = field(default_factory=list)
    conflicts: int = 0  # runs that changed while being merged: left as they were
    deferred: int = 0  # runs left for a later pass: merging them would cross min_free_disk
    unreadable: int = 0  # runs left because a file did not read (a corrupt one is quarantined)
    failed: bool = False  # the pass stopped on an error (what was merged before it stays)

    @property
    def segments_removed(self) -> int:
        """How many fewer segments the merges left."""
        return sum(m.segments - 1 for m in self.merged)


MERGEABLE = (SegmentState.SEALED, SegmentState.REPLICATED)


def plan_runs(
    segments: Sequence[SegmentRecord],
    policy: ConsolidatePolicy,
    now: int,
    states: Sequence[SegmentState] = MERGEABLE,
) -> list[list[SegmentRecord]]:
    """The runs to merge among one partition's rows (any state), in offset order: neighbours
    in one readable state and schema, each older than min_age and small (`small_below`),
    together at most target_bytes, at least two. Any other row ends a run, so a merged
    segment never spans an offset another row holds. `states`: the readable states merged
    (replicated only, where a replication run may be copying sealed segments)."""
    runs: list[list[SegmentRecord]] = []
    current: list[SegmentRecord] = []
    size = 0
    min_age_ms = int(policy.min_age_s * 1000)
    for segment in sorted(segments, key=lambda s: s.start_offset):
        if segment.start_offset < 0:
            continue  # retired by an earlier swap, waiting for its file to be removed
        eligible = (
            segment.state in states
            and now - segment.created_at >= min_age_ms
            and segment.size_bytes < policy.small_below
        )
        fits = (
            current
            and segment.state == current[0].state
            and segment.schema_fingerprint == current[0].schema_fingerprint
            and size + segment.size_bytes <= policy.target_bytes
        )
        if eligible and fits:
            current.append(segment)
            size += segment.size_bytes
            continue
        if len(current) > 1:
            runs.append(current)
        current, size = ([segment], segment.size_bytes) if eligible else ([], 0)
    if len(current) > 1:
        runs.append(current)
    return runs


class Consolidator(BackgroundTask):
    """Merges the small segments of the topics it has a policy for; call `run()` or
    `start()`."""

    thread_name = "consolidation"

    def __init__(
        self,
        store: StoreHandle,
        topics: Mapping[str, ConsolidatePolicy],
        *,
        indexes: Mapping[str, IndexPolicy] | None = None,
        resolve: Callable[[str], tuple[ConsolidatePolicy, IndexPolicy] | None] | None = None,
        compression: Compression | AdaptiveCompression = "lz4",
        fsync: bool = True,
        guard: Guard | None = None,
        states: Sequence[SegmentState] = MERGEABLE,
        observer: Callable[[ConsolidationReport], None] | None = None,
        write: WriteSegment = write_segment,
        min_free_disk_bytes: int = 0,
        disk_free: Callable[[], int] | None = None,
        pace: Pace | None = None,
    ) -> None:
        """`topics` and `indexes` name policies outright; `resolve` answers for any other
        topic of the store (None: not consolidated). `observer` hears every pass (metrics).
        A run is merged only while the disk keeps `min_free_disk_bytes` free with the merged
        file written (`disk_free`: free bytes now, the data folder's filesystem by default).
        `compression`: a codec, or the writer's choice per partition (`writer.codecs`), so
        that a partition whose data does not compress is merged uncompressed too. `pace`:
        the byte rate a pass keeps to over its runs (each run's bytes before it is merged);
        unpaced by default."""
        self.store = store
        self.topics = dict(topics)
        self.indexes = dict(indexes or {})
        self.codecs = (
            compression
            if isinstance(compression, AdaptiveCompression)
            else AdaptiveCompression(compression, adaptive=False)
        )
        self.fsync = fsync
        self.states = tuple(states)
        self.failed_passes = 0
        self._resolve = resolve
        self._guard = guard or self._locked
        self._observer = observer
        self._write = write  # tests inject failing writers here
        self.min_free_disk_bytes = min_free_disk_bytes
        self._disk_free = disk_free or (lambda: shutil.disk_usage(store.data_dir).free)
        self.pace = pace or Pace(None)
        super().__init__()

    def policies(self) -> dict[str, ConsolidatePolicy]:
        """The topics of the store to consolidate now, with their policies."""
        found = dict(self.topics)
        if self._resolve is not None:
            for topic in self.store.manifest.topics():
                resolved = None if topic in found else self._resolve(topic)
                if resolved is not None:
                    found[topic], self.indexes[topic] = resolved
        return found

    def run(self, now: int | None = None) -> ConsolidationReport:
        """One pass over every topic with a policy; `now` is epoch ms (tests pass their own
        clock). A partition is skipped while its guard (or its lock, held by a writer)
        says no. A run with a file that does not read is left as it is (a corrupt file is
        quarantined, as a read quarantines it) and the pass goes on with the other runs.
        Runs start at the pace's rate; `stop()` ends the pass before its next run.

        Returns:
            The runs merged, those left because they changed meanwhile (`conflicts`), those
            left for the disk floor (`deferred`) and those with a file that did not read
            (`unreadable`).
        """
        stamp = now_ms() if now is None else now
        report = ConsolidationReport()
        for topic, policy in sorted(self.policies().items()):
            rows = self.store.manifest.segments(topic, states=tuple(SegmentState))
            by_partition: dict[int, list[SegmentRecord]] = {}
            for row in rows:
                by_partition.setdefault(row.partition, []).append(row)
            for partition, segments in sorted(by_partition.items()):
                for run in plan_runs(segments, policy, stamp, self.states):
                    # Paced outside the guard: a partition's owner may let it go meanwhile.
                    if not self.pace.take(sum(s.size_bytes for s in run), self._stop.wait):
                        return self._reported(report)  # stopping: the rest waits for a pass
                    with self._guard(topic, partition) as allowed:
                        if not allowed:
                            break
                        if self._room_for(topic, partition, run):
                            self._merge(topic, partition, run, report)
                        else:
                            report.deferred += 1
        return self._reported(report)

    def _reported(self, report: ConsolidationReport) -> ConsolidationReport:
        if self._observer is not None:
            self._observer(report)
        return report

    def _loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.run()
            except Exception as exc:  # the next pass tries again; the count shows it
                self.failed_passes += 1
                log.error("consolidation_failed", error=str(exc), error_type=type(exc).__name__)
                if self._observer is not None:
                    self._observer(ConsolidationReport(failed=True))

    def _room_for(self, topic: str, partition: int, run: list[SegmentRecord]) -> bool:
        """Whether the merged file fits above the disk floor. The run's files stay for the
        deletion grace after the swap, so a merge takes about the run's size again for that
        long: below the floor it would eat the space the floor keeps for the system, and
        retention, counting the retired run as freed, would not make up for it."""
        if self.min_free_disk_bytes <= 0:
            return True
        size = sum(s.size_bytes for s in run)
        free = self._disk_free()
        if free - size >= self.min_free_disk_bytes:
            return True
        log.warning(
            "consolidation_deferred",
            topic=topic,
            partition=partition,
            start_offset=run[0].start_offset,
            end_offset=run[-1].end_offset,
            bytes=size,
            disk_free=free,
            min_free_disk=self.min_free_disk_bytes,
        )
        return False

    def _merge(
        self, topic: str, partition: int, run: list[SegmentRecord], report: ConsolidationReport
    ) -> None:
        first, last = run[0], run[-1]
        try:
            table = pa.Table.from_batches(list(self._rows(run)))
        except SegmentUnavailableError as exc:
            # One bad file must not stop the merges of every other run, pass after pass.
            self._unreadable(run, exc, report)
            return
        name = consolidated_name(first.start_offset, last.end_offset)
        path, stats = self._write(
            partition_dir(self.store.data_dir, topic, partition),
            table,
            self.codecs.choose(topic, partition),
            fsync=self.fsync,
            index=self.indexes.get(topic, IndexPolicy()),
            name=name,
        )
        merged = SegmentFile(stats, f"topics/{topic}/{partition}/{name}", table.schema)
        try:
            self.store.manifest.swap_segments(run, merged)
        except ManifestConflictError as exc:
            path.unlink(missing_ok=True)
            report.conflicts += 1
            log.warning(
                "consolidation_skipped",
                topic=topic,
                partition=partition,
                start_offset=first.start_offset,
                end_offset=last.end_offset,
                reason=str(exc),
            )
            return
        except Exception:
            # Only a definite failure makes the file an orphan: the swap may have landed.
            if not self.store.manifest.has_segment(topic, partition, stats):
                path.unlink(missing_ok=True)
                raise
        done = Merge(
            topic,
            partition,
            first.start_offset,
            last.end_offset,
            len(run),
            sum(s.size_bytes for s in run),
            stats.size_bytes,
        )
        report.merged.append(done)
        log.info(
            "segments_consolidated",
            topic=topic,
            partition=partition,
            start_offset=done.start_offset,
            end_offset=done.end_offset,
            segments=done.segments,
            records=stats.record_count,
            bytes_before=done.bytes_before,
            bytes_after=done.bytes_after,
        )

    def _unreadable(
        self, run: list[SegmentRecord], exc: SegmentUnavailableError, report: ConsolidationReport
    ) -> None:
        """A file of `run` did not read: the run stays as it is. A corrupt one is
        quarantined, as a read quarantines it, so the next pass plans without it; a missing
        or unopenable one is left to verify (it may be a disk coming back)."""
        report.unreadable += 1
        first, last = run[0], run[-1]
        if isinstance(exc, SegmentCorruptError):
            quarantine(self.store.manifest, exc.segment, exc.problem, found_by="consolidation")
        log.error(
            "consolidation_run_unreadable",
            topic=first.topic,
            partition=first.partition,
            start_offset=first.start_offset,
            end_offset=last.end_offset,
            error=str(exc),
            error_type=type(exc).__name__,
        )

    def _rows(self, run: list[SegmentRecord]) -> Iterator[pa.RecordBatch]:
        """Every row of the run in offset order, each batch checked against its checksums
        (a corrupt segment raises, and the run stays as it is)."""
        request = ReadRequest.whole(run[0].topic)
        counters = ScanCounters()
        for segment in run:
            yield from segment_batches(self.store.segment_path(segment), segment, request, counters)

    @contextlib.contextmanager
    def _locked(self, topic: str, partition: int) -> Iterator[bool]:
        """Without a writer's guard: the partition's lock, or skip it while a writer has it."""
        directory = partition_dir(self.store.data_dir, topic, partition)
        try:
            lock = PartitionLock.acquire(directory, timeout_s=0)
        except PartitionLockedError:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()
