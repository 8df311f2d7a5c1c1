"""A Writer that journals every append group before it is sealed (plateau_core.journal): the
Kafka API's, which answers acks=all once a group is durable in the journal.

Each partition's buffer remembers the first journal group it holds; after every seal the
journal is released below the lowest group still unsealed anywhere, and the files holding
only sealed groups go. A partition given up unsealed (its buffer dropped) pins its groups
for the next owner to replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from plateau_core.handle import StoreHandle
from plateau_core.journal import Journal
from plateau_core.listener import WriterListener
from plateau_core.policies import WriterPolicy
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats
from plateau_core.slog import Append, Prepared, SegmentLog
from plateau_core.writer import Writer


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
        super().__init__(store, policy, listener, write=write)
        self.journal = journal
        journal.notify = self.listener.on_journaled
        self._pinned: int | None = None  # groups from here up belong to a dropped buffer

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
        return seq

    def _dropping(self, slog: SegmentLog) -> None:
        if slog.journal_from is not None:
            pinned = self._pinned
            self._pinned = slog.journal_from if pinned is None else min(pinned, slog.journal_from)

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
