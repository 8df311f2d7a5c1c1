"""A Writer that journals every append group before it is sealed (plateau_core.journal): the
Kafka API's, which answers acks=all once a group is durable in the journal.

Each partition's buffer remembers the first journal group it holds; after every seal the
journal is released below the lowest group still unsealed anywhere, and the files holding
only sealed groups go. A partition given up unsealed (its buffer dropped) pins its groups
for the next owner to replay.

Files go oldest first, so one partition with old unsealed records (a long roll.max_age, a
quiet topic) would keep every file written since. Past `journal_max_bytes` of files, the
partitions that keep the oldest ones seal early: the journal stays about that size whatever
the roll policies.

A journal whose thread failed (plateau_core.journal) makes no group durable again: appends
are refused with its JournalFailedError, the partitions holding groups it did not sync never
seal (their records were never acknowledged), and a flush says so at once instead of at its
deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path

import structlog

from plateau_core.errors import JournalFailedError
from plateau_core.handle import StoreHandle
from plateau_core.journal import Journal
from plateau_core.listener import TopicPartition, WriterListener, tell
from plateau_core.policies import WriterPolicy
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats
from plateau_core.slog import Append, Prepared, SegmentLog
from plateau_core.writer import Writer

log = structlog.get_logger(__name__)


class JournaledWriter(Writer):
    journal: Journal
    _link_groups = False

    def __init__(
        self,
        store: StoreHandle,
        journal: Journal,
        policy: WriterPolicy | None = None,
        listener: WriterListener | None = None,
        *,
        write: Callable[..., tuple[Path, SegmentStats]] = write_segment,
    ) -> None:
        self._told_early: dict[TopicPartition, int] = {}  # the buffer each last logged for
        super().__init__(store, policy, listener, write=write)
        self.journal = journal
        # Raised through the journal's thread, a hook's error would end it: nothing after
        # would ever be journaled.
        journal.notify = partial(tell, self.listener.on_journaled)
        journal.notify_failed = partial(tell, self.listener.on_journal_failed)
        self._pinned: int | None = None  # groups from here up belong to a dropped buffer

    def append_group(self, appends: Sequence[Append], *, journal: bool = True) -> int | None:
        """Writer.append_group; refused (JournalFailedError) once the journal failed. A
        journal failing after this check still takes the group's number: the group fails
        with the others."""
        failure = self.journal.failure
        if journal and failure is not None:
            raise JournalFailedError(failure.first_seq, failure.cause)
        return super().append_group(appends, journal=journal)

    def _held(self) -> int:
        # What is queued for the journal is memory too: its groups' encoded bytes.
        return super()._held() + self.journal.backlog_bytes

    def _journal(
        self,
        appends: Sequence[Append],
        batches: Sequence[Sequence[Prepared]],
        changed: Iterable[SegmentLog],
    ) -> int:
        seq = self.journal.append(appends, batches)
        for slog in changed:
            if slog.journal_from is None:
                slog.journal_from = seq
            slog.journal_last = seq
        return seq

    def _unsealable(self, pending: Sequence[SegmentLog]) -> JournalFailedError | None:
        failure = self.journal.failure
        if failure is None:
            return None
        durable = self.journal.durable_seq
        if all(
            s.in_flight is None and s.journal_last is not None and s.journal_last > durable
            for s in pending
        ):
            return JournalFailedError(failure.first_seq, failure.cause)
        return None

    def _sealable(self, slog: SegmentLog) -> bool:
        # Write-ahead: nothing reaches the manifest before its group is durable in the
        # journal. A group spans partitions (a batch, its watermark move over poison records
        # and their dead letters): sealed first, one part could outlive a crash that the rest,
        # not yet synced, did not, and the replay could not put it back together.
        last = slog.journal_last
        return last is None or last <= self.journal.durable_seq

    def _dropping(self, slog: SegmentLog) -> None:
        # The seal in flight may fail after this: its groups stay in the journal as well.
        # Pinned groups that do land are skipped by the replay.
        in_flight = None if slog.in_flight is None else slog.in_flight.journal_from
        for first in (slog.journal_from, in_flight):
            if first is not None:
                pinned = self._pinned
                self._pinned = first if pinned is None else min(pinned, first)

    def _early(self, now: float) -> list[SegmentLog]:
        # The ticker may run before __init__ has set the journal.
        journal: Journal | None = getattr(self, "journal", None)
        if journal is None:
            return []
        below = journal.cut(self.policy.journal_max_bytes)
        if below is None:
            return []
        early = [
            slog
            for slog in self._logs.values()
            if slog.journal_from is not None and slog.journal_from < below and slog.can_seal(now)
        ]
        for slog in early:
            first = slog.journal_from
            if first is not None and self._told_early.get(slog.key) != first:
                self._told_early[slog.key] = first
                log.info(
                    "seal_early",
                    topic=slog.topic,
                    partition=slog.partition,
                    last_offset=slog.last_offset,
                    rows=slog.rows,
                    reason="its records keep journal files beyond journal_max_bytes",
                    journal_max_bytes=self.policy.journal_max_bytes,
                )
        return early

    def _sealed_group(self) -> None:
        with self._cond:
            unsealed = [
                seq
                for slog in self._logs.values()
                for seq in (
                    slog.journal_from,
                    None if slog.in_flight is None else slog.in_flight.journal_from,
                )
                if seq is not None
            ]
            if self._pinned is not None:
                unsealed.append(self._pinned)
            floor = min(unsealed, default=self.journal.next_seq)
        self.journal.release(floor)

    def _stopped(self) -> None:
        self.journal.close(everything_sealed=self._pinned is None)
