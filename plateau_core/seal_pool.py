"""The seal machinery under a Writer: the partitions' buffers and the bytes they hold, the
bounded thread pool their seals run on, the ticker that starts seals as partitions come due,
and what the end of a seal does to them. Sealed, its bytes leave the buffers; failed, its
records go back to be sealed again after a backoff.

Partitions that must land together seal as one group (plateau_core.seal_groups), and a
group is one seal on a pool thread (plateau_core.sealing).

A fault around a seal does not stop the sealing: a seal that gets no thread goes back as a
failed one does, a tick that fails is logged and the ticker goes on, and what fails after a
seal is recorded (a journal file that will not go) is logged without keeping the room it
freed from those who wait for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import structlog

from plateau_core.adaptive_compression import AdaptiveCompression
from plateau_core.daemon_pool import DaemonPool
from plateau_core.errors import FlushTimeoutError, PlateauError
from plateau_core.group_commit import GroupCommitter
from plateau_core.handle import StoreHandle
from plateau_core.listener import TopicPartition, WriterListener, tell
from plateau_core.policies import WriterPolicy
from plateau_core.seal_groups import SealGroups
from plateau_core.sealing import CommitUnknownError, announce, log_failure, seal_group
from plateau_core.segment_stats import SegmentStats
from plateau_core.slog import SealJob, SegmentLog

log = structlog.get_logger(__name__)


class SealPool:
    """Per-partition buffers and the seals that turn them into segments. A Writer builds on
    it: it takes partitions and gives them up (plateau_core.ownership) and buffers appends."""

    def __init__(
        self,
        store: StoreHandle,
        policy: WriterPolicy,
        listener: WriterListener,
        write: Callable[..., tuple[Path, SegmentStats]],
    ) -> None:
        self.store = store
        self.policy = policy
        self.listener = listener
        self._write_segment = write  # tests inject failing or slow writers here
        # Shared with the writer's consolidation (Consolidator(compression=writer.codecs)).
        self.codecs = AdaptiveCompression(policy.compression, adaptive=policy.compression_adaptive)
        self._cond = threading.Condition()
        self._logs: dict[TopicPartition, SegmentLog] = {}
        self._sealing: set[TopicPartition] = set()  # partitions with a seal running
        self._buffered = 0
        self._in_flight = 0
        self._groups = SealGroups(self._logs, self.policy.seal_together)
        # seal_together: the partitions appended to since `_schedule` last looked at every
        # one, and the soonest any other may come due by time (its age, a retry's backoff).
        # A produce request's `seal_due` then looks at its own partitions, not at all of a
        # store's hundreds, whose roll it already knows will not come due before then.
        self._touched: dict[TopicPartition, SegmentLog] = {}
        self._look_again_at = 0.0
        # Daemon threads: a seal stuck on a hung disk must not keep the process from exiting.
        self._pool = DaemonPool(self.policy.writer_threads, "seal")
        self._committer = GroupCommitter(store.manifest)
        self._closed = False
        # Started by the writer once it is set up: a tick may start seals.
        self._ticker = threading.Thread(target=self._tick_loop, name="slog-ticker", daemon=True)

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
            JournalFailedError: The journal failed, and the partitions left hold groups it
                never synced: they cannot seal (a restart replays what it did sync).
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            keys = list(self._logs) if partitions is None else [tuple(k) for k in partitions]
            targets = [self._logs[k] for k in keys if k in self._logs]
            for slog in targets:
                # A flush is an explicit request: try now even inside a retry backoff.
                slog.retry_at = None
            self._look_again_at = 0.0
            while True:
                self._start([s for s in targets if s.can_seal(time.monotonic())])
                pending = [s for s in targets if s.pending() or s.in_flight is not None]
                if not pending:
                    return
                unsealable = self._unsealable(pending)
                if unsealable is not None:
                    raise unsealable
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FlushTimeoutError([(s.topic, s.partition) for s in pending], timeout_s)
                self._cond.wait(min(remaining, self._groups.wait_s(0.05)))

    # --- internals (callers hold self._cond unless said otherwise) ---------------------------

    # A group's partitions seal in one manifest transaction; a journal gives that atomicity
    # instead (it keeps a group until every part of it is sealed, and replays the rest).
    _link_groups = True

    # What a JournaledWriter does to pick partitions to seal early, to hold back a seal
    # whose records are not in its journal yet and once a group sealed (without the lock);
    # what an owner does once a seal of a partition ended (without the lock).
    def _early(self, now: float) -> list[SegmentLog]:
        return []  # partitions to seal before their roll says so

    def _sealable(self, slog: SegmentLog) -> bool:
        return True

    def _unsealable(self, pending: Sequence[SegmentLog]) -> PlateauError | None:
        return None  # why the partitions a flush waits for can never seal

    def _sealed_group(self) -> None: ...
    def _let_go_if_done(self, key: TopicPartition) -> None: ...

    def seal_due(self) -> None:
        """Start the seals that are due now. With `seal_together` appends do not start
        seals themselves: a caller landing many partitions' records at once (one produce
        request) calls this after the last, so they seal as one group; the ticker does it
        every `tick_s` otherwise."""
        with self._cond:
            self._groups.hold.arrived()
            self._look()

    def _look(self) -> None:
        """`_schedule` for every partition, once something may have come due since it last
        ran (seal_together; without it, every time)."""
        if not self.policy.seal_together:
            self._schedule()
            return
        now = time.monotonic()
        if self._groups.in_flight or self._groups.hold.holding(now):
            # No group starts before that one ends (which looks at every partition) or the
            # hold runs out (the ticker wakes for it, or a later request).
            return
        touched = list(self._touched.values())
        self._touched.clear()
        if (
            now < self._look_again_at
            and not self._groups.waiting
            and not any(s.due(now) for s in touched)
        ):
            # Nothing came due since the last look at every partition: of the others, none
            # before `_look_again_at`; of these, none yet.
            self._look_again_at = min(self._look_again_at, _next_look(touched))
            self._start(self._early(now))
            return
        self._schedule()

    def _schedule(self, candidates: Iterable[SegmentLog] | None = None) -> None:
        """Start the seals of the partitions that are due (among `candidates`; all of them
        when sealing together, so one group commit takes every partition that is due)."""
        together = self.policy.seal_together
        pool = self._logs.values() if candidates is None or together else candidates
        now = time.monotonic()
        due = [s for s in pool if s.due(now)]
        self._start(due + self._early(now))
        if together:  # what `_look` goes by
            self._touched.clear()
            # Due and not started (records not in the journal yet, a group to wait for):
            # look again at the next request.
            left = any(s.in_flight is None for s in due)
            self._look_again_at = 0.0 if left else _next_look(self._logs.values())

    def _start(self, selected: list[SegmentLog]) -> None:
        for group in self._groups.form(selected):
            jobs = [self._take(m) for m in group if m.pending() and self._sealable(m)]
            if jobs:
                self._groups.in_flight += 1
                try:
                    self._pool.submit(self._seal, jobs)
                except Exception as exc:
                    # No thread to be had: raised, it would end the ticker, or fail an append
                    # whose records are buffered, with the jobs taken and never sealed.
                    delays = self._put_back(jobs, exc)
                    for job, delay in zip(jobs, delays, strict=True):
                        log_failure(job, exc, delay)

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
                codecs=self.codecs,
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
        try:
            for job in group:
                self._let_go_if_done(job.key)
            self._sealed_group()
        except Exception as exc:
            # The seal is recorded; the journal's next release takes what this one left.
            # Raised, it was lost in the pool's future, and the room the seal freed with it.
            log.exception(
                "seal_aftermath_failed",
                partitions=[f"{job.topic}[{job.partition}]" for job in group],
                error=f"{type(exc).__name__}: {exc}",
            )
        tell(self.listener.on_capacity)

    def _failed(self, group: list[SealJob], exc: Exception) -> None:
        delays = self._put_back(group, exc)
        for job in group:
            self._let_go_if_done(job.key)
        for job, delay in zip(group, delays, strict=True):
            log_failure(job, exc, delay)
            tell(self.listener.on_seal_failed, job.topic, job.partition, exc)

    def _put_back(self, group: list[SealJob], exc: Exception) -> list[float]:
        """A seal of `group` failed or never ran: its records go back to be sealed again
        after a backoff; returns each job's delay."""
        keys = {job.key for job in group}
        with self._cond:
            self._groups.in_flight -= 1
            self._look_again_at = 0.0  # a backoff to look at, and a group no longer in flight
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
        return delays

    def _tick_loop(self) -> None:
        while not self._closed:
            with self._cond:
                try:
                    self._look()
                except Exception as exc:
                    # Ended, the ticker would start no seal again: none by age, no failed
                    # seal's retry, and whoever waits for those would wait for ever.
                    log.exception("seal_tick_failed", error=f"{type(exc).__name__}: {exc}")
                self._cond.wait(self._groups.wait_s(self.policy.tick_s))


def _next_look(logs: Iterable[SegmentLog]) -> float:
    """The soonest a partition not in a seal may come due by time alone: its buffer's age, a
    failed seal's backoff (a partition in a seal is looked at again when it ends)."""
    soonest = float("inf")
    for slog in logs:
        if slog.in_flight is not None:
            continue
        if slog.retry_at is not None:
            soonest = min(soonest, slog.retry_at)
        if slog.first_buffered_at is not None:
            soonest = min(soonest, slog.first_buffered_at + slog.roll.max_age_s)
    return soonest
