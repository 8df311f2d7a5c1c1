"""Retention: keep the store inside its fixed footprint, oldest segments first.

Deleting is crash-safe and reader-safe: a segment is first marked `deleting` (committed),
its file is unlinked only after the grace period (readers holding a snapshot finish), and
the row goes last. A crash between steps is completed by the next run. Partition
watermarks are never touched, so a deleted range is never ingested again.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import structlog

from plateau_core.background import BackgroundTask
from plateau_core.handle import StoreHandle
from plateau_core.manifest import SegmentRecord, SegmentState, now_ms
from plateau_core.manifest.listing import SegmentAge
from plateau_core.names import segment_start
from plateau_core.policies import RetentionPolicy, StoreLimits

log = structlog.get_logger(__name__)

DiskFree = Callable[[], int]
WATCH_INTERVAL_S = 0.1
# A pass the watch brings on starts no sooner than this many times the last pass's length
# after it ended. A pass lists every live segment: on a store of hundreds of thousands of
# small segments it takes seconds, and at a store-wide limit a seal crosses it again every
# second, so passes back to back would keep a core (and the interpreter lock) busy for good.
PASS_SPACING = 9


@dataclass
class RetentionReport:
    """What one pass did: segments it marked deleting (their files stay for the deletion
    grace), by why, and those whose grace ended and are now gone."""

    marked: list[SegmentRecord] = field(default_factory=list)  # by a topic's own policy
    forced: list[SegmentRecord] = field(default_factory=list)  # unreplicated, by a hard limit
    global_marked: list[SegmentRecord] = field(default_factory=list)  # by a store-wide limit
    deleted: list[SegmentRecord] = field(default_factory=list)  # unlinked and row removed

    @property
    def marked_bytes(self) -> int:
        """Bytes of the segments marked by this pass, for whatever reason."""
        return sum(s.size_bytes for s in [*self.marked, *self.global_marked, *self.forced])


def _age_key(segment: SegmentAge) -> tuple[int, int, int]:
    return (segment.time_max, segment.partition, segment.start_offset)


class Retention(BackgroundTask):
    """Applies per-topic policies and the store-wide limits; call `run()` or `start()`."""

    thread_name = "retention"

    def __init__(
        self,
        store: StoreHandle,
        *,
        default: RetentionPolicy | None = None,
        topics: Mapping[str, RetentionPolicy] | None = None,
        limits: StoreLimits | None = None,
        disk_free: DiskFree | None = None,
        resolve: Callable[[str], RetentionPolicy | None] | None = None,
        observer: Callable[[RetentionReport], None] | None = None,
    ) -> None:
        """Retention of `store`; nothing runs until `run()` or `start()`.

        Args:
            store: The store whose segments are retired.
            default: The policy of a topic neither `topics` nor `resolve` names (default:
                no limit).
            topics: Policies by topic name.
            limits: Store-wide limits: bytes, free disk, and the deletion grace.
            disk_free: Free bytes now (default: the data folder's filesystem).
            resolve: The policy of a topic not in `topics` (None: the default's).
            observer: Told of every pass's report (metrics); an error it raises is raised
                by `run()`, after the pass.
        """
        self.store = store
        self.default = default or RetentionPolicy()
        self.topics = dict(topics or {})
        self.limits = limits or StoreLimits()
        self._disk_free = disk_free or (lambda: shutil.disk_usage(store.data_dir).free)
        self._lock = threading.Lock()
        super().__init__()
        self.forced_total = 0
        self.failed_passes = 0
        self._resolve = resolve
        self._observer = observer  # told of every pass's report (metrics)
        # The watch's totals per topic (bytes, count) of the readable segments with ids up
        # to _seen_id: each look adds the segments sealed since, and a pass forgets them
        # (segments it, consolidation or verify took out are only counted out by a full sum).
        self._totals: dict[str, tuple[int, int]] | None = None
        self._seen_id = 0
        self._passes = 0  # a look that a pass ran beside keeps nothing it counted
        self._watch_from = 0.0  # monotonic time before which the watch starts no pass

    def policy(self, topic: str) -> RetentionPolicy:
        """`topics[topic]`, else what `resolve(topic)` says, else the default."""
        if topic in self.topics:
            return self.topics[topic]
        resolved = self._resolve(topic) if self._resolve is not None else None
        return resolved or self.default

    def _watched_totals(self) -> dict[str, tuple[int, int]]:
        manifest = self.store.manifest
        passes = self._passes
        upto = manifest.last_segment_id()
        if self._totals is None or upto < self._seen_id:  # the first look, or a new manifest
            totals = manifest.topic_totals(upto_id=upto)
        else:
            totals = dict(self._totals)
            if upto > self._seen_id:
                added = manifest.topic_totals(after_id=self._seen_id, upto_id=upto)
                for topic, (size, count) in added.items():
                    before = totals.get(topic, (0, 0))
                    totals[topic] = (before[0] + size, before[1] + count)
        if passes == self._passes:
            self._totals, self._seen_id = totals, upto
        return totals

    # --- one pass ---------------------------------------------------------------------------

    def run(self, now: int | None = None) -> RetentionReport:
        """One retention pass; `now` is epoch ms (tests pass their own clock).

        Finishes deletions whose grace ended, marks what the topics' policies and then the
        store-wide limits retire (oldest first, by newest record), and with no deletion
        grace deletes those at once. Unreplicated segments of topics that require
        replication go only when a store-wide limit leaves nothing else: they are logged as
        errors and counted in `forced_total`. Passes run one at a time.

        Returns:
            What the pass marked and deleted.
        """
        with self._lock:
            # A look beside this pass (over_limits from another thread) counts from the
            # manifest, not from totals kept before it: the marks below commit before the
            # pass ends, and those totals still hold what they retire.
            self._totals = None
            self._passes += 1
            stamp = now_ms() if now is None else now
            report = RetentionReport()
            report.deleted += self._finish_deletions(stamp)
            live = self.store.manifest.segment_ages()
            by_topic: dict[str, list[SegmentAge]] = {}
            for segment in live:
                by_topic.setdefault(segment.topic, []).append(segment)
            chosen: set[int] = set()
            marked: list[SegmentAge] = []
            for topic in sorted(by_topic):
                segments = sorted(by_topic[topic], key=_age_key)
                marked += self._by_topic_policy(topic, segments, stamp, chosen)
            global_marked, forced = self._by_store_limits(live, chosen)
            # Full records of the few chosen only: the report and the log lines tell them.
            records = {r.id: r for r in self.store.manifest.segments_by_id(sorted(chosen))}
            for group, picked in (
                (report.marked, marked),
                (report.global_marked, global_marked),
                (report.forced, forced),
            ):
                found = [records[s.id] for s in picked if s.id in records]
                moved = set(self.store.manifest.mark_deleting([s.id for s in found], at=stamp))
                group += [s for s in found if s.id in moved]
            self._log_marks(report)
            report.deleted += self._finish_deletions(stamp)
            self._totals = None
            self._passes += 1
        if self._observer is not None:
            self._observer(report)
        return report

    def _by_topic_policy(
        self, topic: str, segments: list[SegmentAge], now: int, chosen: set[int]
    ) -> list[SegmentAge]:
        policy = self.policy(topic)
        eligible = [s for s in segments if not policy.require_replicated or s.replicated]
        picked: list[SegmentAge] = []

        def pick(segment: SegmentAge) -> None:
            if segment.id not in chosen:
                chosen.add(segment.id)
                picked.append(segment)

        if policy.max_age_s is not None:
            cutoff = now - int(policy.max_age_s * 1000)
            for s in eligible:
                if s.time_max < cutoff:
                    pick(s)
        if policy.max_segments is not None:
            excess = sum(1 for s in segments if s.id not in chosen) - policy.max_segments
            for s in eligible:
                if excess <= 0:
                    break
                if s.id not in chosen:
                    pick(s)
                    excess -= 1
        if policy.max_bytes is not None:
            total = sum(s.size_bytes for s in segments if s.id not in chosen)
            for s in eligible:
                if total <= policy.max_bytes:
                    break
                if s.id not in chosen:
                    pick(s)
                    total -= s.size_bytes
        return picked

    def _by_store_limits(
        self, live: list[SegmentAge], chosen: set[int]
    ) -> tuple[list[SegmentAge], list[SegmentAge]]:
        """(marked, forced): what the store-wide limits retire beyond `chosen`, which they
        extend."""
        remaining = sorted((s for s in live if s.id not in chosen), key=_age_key)
        retiring = sum(s.size_bytes for s in live if s.id in chosen)
        need = self._bytes_to_free(remaining, retiring)
        marked: list[SegmentAge] = []
        forced: list[SegmentAge] = []
        if need <= 0:
            return marked, forced
        # Replicated (or unconstrained) segments go first; unreplicated ones of topics that
        # require replication go only when nothing else is left: a forced deletion.
        soft = [s for s in remaining if self._deletable_without_force(s)]
        hard = [s for s in remaining if not self._deletable_without_force(s)]
        for segment, bucket in [*((s, marked) for s in soft), *((s, forced) for s in hard)]:
            if need <= 0:
                break
            bucket.append(segment)
            chosen.add(segment.id)
            need -= segment.size_bytes
        return marked, forced

    def _deletable_without_force(self, segment: SegmentAge) -> bool:
        return not self.policy(segment.topic).require_replicated or segment.replicated

    def _bytes_to_free(self, remaining: Iterable[SegmentAge], retiring: int) -> int:
        """What the store-wide limits still need freed once `remaining` is what stays live and
        `retiring` bytes (the topic policies' picks of this pass) wait out the grace."""
        need = 0
        if self.limits.max_bytes is not None:
            manifest = self.store.manifest.database_bytes()
            used = sum(s.size_bytes for s in remaining) + manifest
            need = max(need, used - self.limits.max_bytes)
        if self.limits.min_free_disk_bytes is not None:
            shortfall = self.limits.min_free_disk_bytes - self._disk_free_soon() - retiring
            need = max(need, shortfall)
        return need

    def _disk_free_soon(self) -> int:
        """Free disk once the segments already retired are deleted: their files stay for the
        deletion grace, and counting them short again on every pass (ten times a second)
        would retire the whole store for a shortfall of a segment or two."""
        retired = self.store.manifest.segments(states=(SegmentState.DELETING,))
        return self._disk_free() + sum(s.size_bytes for s in retired)

    def _finish_deletions(self, now: int) -> list[SegmentRecord]:
        cutoff = now - int(self.limits.deletion_grace_s * 1000)
        due = [
            s
            for s in self.store.manifest.segments(states=(SegmentState.DELETING,))
            if s.deleting_at is not None and s.deleting_at <= cutoff
        ]
        for segment in due:
            self.store.segment_path(segment).unlink(missing_ok=True)
        self.store.manifest.remove([s.id for s in due])
        for segment in due:
            log.info(
                "segment_deleted",
                topic=segment.topic,
                partition=segment.partition,
                # A row a consolidation retired keeps its offsets only in its file's name.
                start_offset=segment_start(PurePosixPath(segment.path).name)
                if segment.start_offset < 0
                else segment.start_offset,
                end_offset=segment.end_offset,
                bytes=segment.size_bytes,
            )
        return due

    def _log_marks(self, report: RetentionReport) -> None:
        for reason, group in (("policy", report.marked), ("store_limit", report.global_marked)):
            for s in group:
                log.info(
                    "segment_retired",
                    topic=s.topic,
                    partition=s.partition,
                    start_offset=s.start_offset,
                    end_offset=s.end_offset,
                    bytes=s.size_bytes,
                    reason=reason,
                )
        for s in report.forced:
            self.forced_total += 1
            log.error(
                "segment_retired_unreplicated",
                topic=s.topic,
                partition=s.partition,
                start_offset=s.start_offset,
                end_offset=s.end_offset,
                bytes=s.size_bytes,
                reason="store hard limit reached; deleting a segment not yet replicated",
            )

    # --- in the background ------------------------------------------------------------------

    def _loop(self, interval_s: float) -> None:
        # A full pass every interval; in between, a cheap look at the limits a seal can
        # cross (bytes, segment counts, free disk) every WATCH_INTERVAL_S, so the store
        # overshoots its footprint by what arrives in a fraction of a second, not in a
        # whole interval. When a pass leaves the store over a limit it cannot fix (nothing
        # deletable), the next one waits for the interval instead of spinning.
        next_pass = time.monotonic()
        stuck = False
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now >= next_pass or (
                    not stuck and now >= self._watch_from and self.over_limits()
                ):
                    began = time.monotonic()
                    report = self.run()
                    freed = bool(report.marked_bytes or report.deleted)
                    stuck = not freed and self.over_limits()
                    ended = time.monotonic()
                    self._watch_from = ended + PASS_SPACING * (ended - began)
                    next_pass = ended + interval_s
            except Exception as exc:  # a failed pass is retried on the next tick
                self.failed_passes += 1
                next_pass = time.monotonic() + interval_s
                log.error("retention_failed", error=str(exc), error_type=type(exc).__name__)
            self._stop.wait(min(WATCH_INTERVAL_S, max(0.0, next_pass - time.monotonic())))

    def over_limits(self) -> bool:
        """Whether a size or count limit is exceeded now: the totals of the segments sealed
        since the last look (or since the last pass, all of them) added to what the looks
        before counted."""
        if (
            self.limits.min_free_disk_bytes is not None
            and self._disk_free() < self.limits.min_free_disk_bytes
            and self._disk_free_soon() < self.limits.min_free_disk_bytes
        ):
            return True
        totals = self._watched_totals()
        if self.limits.max_bytes is not None:
            manifest = self.store.manifest.database_bytes()
            if sum(size for size, _ in totals.values()) + manifest > self.limits.max_bytes:
                return True
        for topic, (size, count) in totals.items():
            policy = self.policy(topic)
            if policy.max_bytes is not None and size > policy.max_bytes:
                return True
            if policy.max_segments is not None and count > policy.max_segments:
                return True
        return False
