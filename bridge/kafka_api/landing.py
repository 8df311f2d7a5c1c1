"""Handing the batches the sink took to the writer: a request's batches as one writer group
(one journal write), or, when the writer refuses that, partition by partition in offset
order, each partition's dead letters after its own and its dead-letter partition's earlier
batches. What the writer does not take yet stays stalled and is handed over again once it
has room; acks=all is answered once the journal group holding a batch is durable.

All on the listener's event loop thread.
"""

from __future__ import annotations

import asyncio
import collections

import structlog

from bridge.kafka_api.dead_letters import dead_letters
from bridge.kafka_api.failures import append_error, refuse_stalled
from bridge.kafka_api.partition import Pending, ProducedPartition
from bridge.kafka_api.stats import SinkStats
from plateau_core import Append, Writer
from plateau_core.errors import BackpressureError, JournalFailedError

log = structlog.get_logger(__name__)


class Landing:
    """A sink's batches on their way into its writer."""

    def __init__(
        self,
        writer: Writer,
        partitions: dict[tuple[str, int], ProducedPartition],
        gathered: dict[tuple[str, int], ProducedPartition],
        stats: SinkStats,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.writer = writer
        self.partitions = partitions
        # Partitions with batches appended by the request being taken and not yet handed to
        # the writer: `land` hands them over together, one writer group and one journal
        # write for the whole request instead of one per partition.
        self.gathered = gathered
        self.stats = stats
        self.loop = loop
        # Journal groups not yet durable, in order: (seq, partition, offset it reaches).
        self._unjournaled: collections.deque[tuple[int, ProducedPartition, int]] = (
            collections.deque()
        )

    def land(self) -> list[asyncio.Future[None]]:
        """Hand every batch `append` took to the writer, as one group when it takes them
        all; returns what resolves once the writer took the rest (those not done yet)."""
        states = list(self.gathered.values())
        self.gathered.clear()
        if not states:
            return []
        try:
            seq = self.writer.append_group(self._group(states))
        except Exception as exc:
            if not isinstance(exc, BackpressureError):
                log.warning(
                    "produce_group_refused",
                    partitions=len(states),
                    error=str(exc),
                    error_type=type(exc).__name__,
                )
            # Partition by partition, as far as the writer takes them; the rest stalls, and
            # a partition whose batch the writer refuses for anything but memory answers it.
            return [landed for state in states if not (landed := self.drain(state)).done()]
        self._took(states, seq)
        return []

    def _group(self, states: list[ProducedPartition]) -> list[Append]:
        """The appends handing every stalled batch of `states` to the writer as one group:
        the partitions' own batches, then their dead letters. A dead-letter partition's own
        batches still stalled hold offsets below where the letters bound for it go: it
        joins `states` (changed in place), ahead of the letters."""
        for state in states:
            for pending in state.stalled:
                dlq = None if pending.letters is None else pending.letters.dlq
                if dlq is not None and dlq.stalled and dlq not in states:
                    states.append(dlq)
        sources = [pending.source for state in states for pending in state.stalled]
        letters: list[Append] = []
        dlq_at: dict[tuple[str, int], int] = {}  # dead letters of several batches in one group
        for state in states:
            for pending in state.stalled:
                letters += self._letters(state, pending, dlq_at)
        return sources + letters

    def _took(self, states: list[ProducedPartition], seq: int | None) -> None:
        """The writer took every stalled batch of `states` (in journal group `seq`)."""
        for state in states:
            self._landed(state, state.stalled, seq)
            state.stalled = []
            self._resolve_landed(state)

    def _letters(
        self, state: ProducedPartition, pending: Pending, dlq_at: dict[tuple[str, int], int]
    ) -> list[Append]:
        """A pending batch's dead letters, at the offsets they will take (`dlq_at`: where
        the group's earlier letters leave each DLQ partition)."""
        letters = pending.letters
        if letters is None:
            return []
        dlq = letters.dlq
        at = dlq_at.get(dlq.key, dlq.next_offset)
        dlq_at[dlq.key] = at + len(letters.poison)
        rows = dead_letters(letters.records, letters.poison, state.key, at)
        return [Append(dlq.topic, dlq.partition, (rows,), urgent=pending.source.urgent)]

    def _landed(self, state: ProducedPartition, landed: list[Pending], seq: int | None) -> None:
        """`landed`, the partition's oldest stalled batches, are in the writer (in journal
        group `seq`). They count as stored once durable (`durable`): a failed journal
        still cuts them out, and a counter cannot go down."""
        end = None
        for pending in landed:
            end = pending.source.advance_to
            assert end is not None
            state.taken(end, pending.records, pending.size)
            if pending.letters is not None:
                pending.letters.dlq.reserve(len(pending.letters.poison))
        if seq is not None and end is not None:
            self._unjournaled.append((seq, state, end))

    def drain(
        self, state: ProducedPartition, draining: frozenset[tuple[str, int]] = frozenset()
    ) -> asyncio.Future[None]:
        """Hand the partition's stalled batches to the writer in order, as far as it takes
        them; the future resolves when none is left (appended, or refused and answered).
        `draining`: the partitions whose drain waits for this one's."""
        self.gathered.pop(state.key, None)
        draining |= {state.key}
        while state.stalled:
            pending = state.stalled[0]
            dlq = None if pending.letters is None else pending.letters.dlq
            if dlq is not None and dlq.stalled:
                if dlq.key in draining:
                    # Dead-letter topics in a circle (or a partition its own): each one's
                    # letters go above the other's own batches, so they land together.
                    if not self._circle(draining):
                        return self._stalled(state)
                    continue
                # Its own batches first: their offsets are below the letters'.
                self.drain(dlq, draining)
                if dlq.stalled:
                    return self._stalled(state)
                continue
            try:
                seq = self.writer.append_group([pending.source, *self._letters(state, pending, {})])
            except BackpressureError as exc:
                _log_throttled(exc)
                return self._stalled(state)
            except Exception as exc:
                refuse_stalled(state, exc, self.stats)
                break
            self._landed(state, [pending], seq)
            state.stalled.pop(0)
        landed = self._resolve_landed(state)
        if landed is None:
            landed = self.loop.create_future()
            landed.set_result(None)
        return landed

    def _circle(self, draining: frozenset[tuple[str, int]]) -> bool:
        """Hand the stalled batches of the partitions `draining` waits on to the writer as
        one group; False when it has no room for them yet. Landed one by one, a partition's
        letters took offsets above its dead-letter partition's own stalled batches, which
        the writer then refused, and with their offsets taken back below the letters'
        every later batch of that partition was refused too."""
        states = [s for key in sorted(draining) if (s := self.partitions.get(key)) and s.stalled]
        try:
            seq = self.writer.append_group(self._group(states))
        except BackpressureError as exc:
            _log_throttled(exc)
            return False
        except Exception as exc:
            for state in states:
                if state.stalled:
                    refuse_stalled(state, exc, self.stats)
                self._resolve_landed(state)
            return True
        self._took(states, seq)
        return True

    def _stalled(self, state: ProducedPartition) -> asyncio.Future[None]:
        if state.landed is None:
            state.landed = self.loop.create_future()
        return state.landed

    def _resolve_landed(self, state: ProducedPartition) -> asyncio.Future[None] | None:
        landed, state.landed = state.landed, None
        if landed is not None and not landed.done():
            landed.set_result(None)
        return landed

    def retry_stalled(self) -> None:
        """Hand what is gathered and every stalled batch to the writer again, as far as it
        takes them."""
        self.land()
        drained = False
        for state in self.partitions.values():
            if state.stalled:
                self.drain(state)
                drained = True
        if drained:
            self.writer.seal_due()  # what was appended now seals as one group

    def journaled(self, seq: int) -> None:
        """Groups up to `seq` are durable: answer the acks=all requests waiting for them."""
        waiting = self._unjournaled
        while waiting and waiting[0][0] <= seq:
            _, state, end = waiting.popleft()
            state.reached(end)
            self.durable(state)

    def durable(self, state: ProducedPartition) -> None:
        """Count the partition's batches that are durable now as stored: synced in the
        journal or sealed, whatever their acks (acks=0 and 1 are answered before that, and
        a failed journal cuts them out all the same)."""
        records, size = state.newly_durable()
        if records:
            self.stats.produced(state.topic, records, size)

    def journal_failed(self, error: JournalFailedError) -> None:
        """No group from `error.first_seq` on will be durable: answer every acks=all request
        still waiting, with the error a failed write gets. Groups below it were reported
        durable before this (the journal's thread tells in order), so none is waiting on
        what is durable."""
        self._unjournaled.clear()
        code, message = append_error(error)
        for state in self.partitions.values():
            first, end = state.durable_to, state.next_offset
            refused = state.refuse_waiters(code, message)
            # Taken, and acks=0 and 1 answered, but cut from the journal: not stored.
            lost = state.never_durable()
            if lost:
                self.stats.failed(state.topic, lost)
            if refused or lost:
                self.stats.errors[("Produce", code.name)] += refused
                log.error(
                    "produce_journal_failed",
                    topic=state.topic,
                    partition=state.partition,
                    start_offset=first,
                    end_offset=end,
                    requests=refused,
                    records=lost,
                    answered=code.name,
                    first_seq=error.first_seq,
                )


def _log_throttled(exc: BackpressureError) -> None:
    log.info(
        "produce_throttled",
        topic=exc.topic,
        partition=exc.partition,
        reason=exc.reason,
        detail=exc.detail,
    )
