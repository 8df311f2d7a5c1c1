"""One partition producers write to: the next offset to hand out, the idempotent producers'
state (sealed and still buffered), and the produce requests waiting for their records to
be durable (acks=all: in the journal, or sealed).

A request waits on one Ticket, whatever number of partitions it wrote: each partition
counts it off as its offsets become durable, and its one future resolves with the last.
A future per partition cost a done-callback and a turn of the event loop each before the
request could be answered.

Everything here runs on the listener's event loop thread; the writer's threads reach it
through `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import time
from dataclasses import dataclass, field

import pyarrow as pa
from kio.schema.errors import ErrorCode

from bridge.config.topics import TopicMapping
from bridge.ingest.decode import Decoder, Poison
from plateau_core import Append
from plateau_core.producers import Check, ProducerBatch, ProducerState, check, resuming


@dataclass
class Outcome:
    """What a produce of one batch to one partition came to."""

    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time_ms: int = -1
    message: str | None = None
    record_errors: list[tuple[int, str]] = field(default_factory=list)
    # What must be durable before acks=all is answered: (partition, offset it must reach).
    durable: list[tuple[ProducedPartition, int]] = field(default_factory=list)


@dataclass
class Letters:
    """The poison records of a produced batch, bound for a dead-letter partition. They get
    offsets there only when appended, so batches of several partitions that share a
    dead-letter partition land in it in the order they are appended."""

    records: pa.RecordBatch  # the whole batch, as envelope rows
    poison: list[Poison]
    dlq: ProducedPartition


@dataclass
class Pending:
    """One produced batch still to hand to the writer: its decoded rows, the producer batch
    and watermark move that go with them (`source`), and its dead letters. All of it is
    recorded in one manifest transaction, or none of it."""

    source: Append
    base: int  # the first offset handed out to it
    outcome: Outcome  # its request's answer for the partition
    before: ProducerState | None = None  # its producer's state before it was remembered
    letters: Letters | None = None
    records: int = 0  # the batch's records and bytes, counted once the writer takes it
    size: int = 0


class Ticket:
    """What one request waits for: `future` resolves once every partition it was handed to
    (`need`) has counted it off (`met`), durable or failed, and the request has handed out
    its last partition (`arm`), or once the timeout given to `arm` ran out, whichever comes
    first. Before that the count can reach zero and rise again: the request waits between
    partitions (for the writer, a schema registry) while the first ones become durable.

    The timeout is a timer of the ticket's own, not asyncio.wait's: that was a waiter, a
    timer and two callbacks per request, 8% of the listener's time (docs/benchmarks.md)."""

    __slots__ = ("_armed", "_loop", "_timer", "future", "remaining")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.remaining = 0
        self._armed = False
        self._timer: asyncio.TimerHandle | None = None

    def need(self) -> None:
        self.remaining += 1

    def met(self) -> None:
        self.remaining -= 1
        self._resolve()

    def arm(self, timeout_s: float | None = None) -> None:
        """Every partition is handed out; with `timeout_s`, `future` resolves after it at
        the latest (the partitions still count off after: nothing else changes)."""
        self._armed = True
        self._resolve()
        if timeout_s is not None and not self.future.done():
            self._timer = self._loop.call_later(timeout_s, self._expire)

    def _resolve(self) -> None:
        if self._armed and self.remaining == 0 and not self.future.done():
            self.future.set_result(None)
            if self._timer is not None:
                self._timer.cancel()

    def _expire(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


@dataclass
class Waiter:
    end: int  # exclusive: the offset the watermark must reach
    ticket: Ticket
    outcome: Outcome | None = None


class ProducedPartition:
    def __init__(  # noqa: PLR0917 - one partition's whole starting state
        self,
        topic: str,
        partition: int,
        mapping: TopicMapping,
        decoder: Decoder,
        watermark: int,
        producers: dict[int, ProducerState],
        max_age_s: float = 0.0,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.mapping = mapping
        self.decoder = decoder
        self.next_offset = watermark
        self.sealed_to = watermark  # every offset below is sealed and in the manifest
        self.durable_to = watermark  # ... or in the journal (acks=all may be answered)
        self.producers = producers
        # When each producer last wrote here (monotonic; those loaded count from now).
        self.seen = dict.fromkeys(producers, time.monotonic())
        # LogAppendTime of recent idempotent batches by base offset, for answering a batch
        # sent again with the time it got (as Kafka does); not kept across restarts.
        self.append_times: dict[int, int] = {}
        self.max_age_s = max_age_s
        self.stalled: list[Pending] = []  # batches the writer refused, retried first
        # Batches the writer took and that are not durable yet, in offset order: (offset
        # they reach, records, bytes). They count as stored only once durable: until then
        # a failed journal can still cut them out, and a counter cannot go down.
        self._undurable: collections.deque[tuple[int, int, int]] = collections.deque()
        self.landed: asyncio.Future[None] | None = None  # resolves once `stalled` is empty
        self._waiters: list[Waiter] = []
        self.failure: Exception | None = None  # why waiting requests were let go (shutdown)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    def check_producer(self, producer_id: int, epoch: int, first: int, last: int) -> Check:
        self.seen[producer_id] = time.monotonic()
        return check(self.producers.get(producer_id), epoch, first, last)

    def remember(self, batch: ProducerBatch) -> None:
        # `seen` was set by check_producer, which every batch remembered went through.
        current = self.producers.get(batch.producer_id)
        self.producers[batch.producer_id] = (
            ProducerState(batch.producer_id, batch.epoch, (batch,))
            if current is None
            else current.with_batch(batch)
        )

    def appended(self, base_offset: int, at_ms: int) -> None:
        self.append_times[base_offset] = at_ms
        if len(self.append_times) > _APPEND_TIMES_KEPT:
            del self.append_times[next(iter(self.append_times))]

    def forget_producers(self, before: float) -> int:
        """Drop the producers that last wrote here before `before` (monotonic)."""
        gone = [pid for pid, at in self.seen.items() if at < before]
        for pid in gone:
            del self.seen[pid]
            self.producers.pop(pid, None)
        return len(gone)

    def reserve(self, count: int) -> int:
        """Hand out `count` contiguous offsets; returns the first."""
        base = self.next_offset
        self.next_offset += count
        return base

    def durable(self, end: int, ticket: Ticket, outcome: Outcome | None = None) -> None:
        """Count `ticket` off once every offset below `end` is durable (now, if it is);
        `outcome` is the answer that waits for it, refused if those offsets are taken back."""
        if end <= self.durable_to:
            return
        ticket.need()
        if not self._waiters or self._waiters[-1].end <= end:
            # Offsets are handed out in order, so this is the common case.
            self._waiters.append(Waiter(end, ticket, outcome))
        else:
            bisect.insort(self._waiters, Waiter(end, ticket, outcome), key=_end)

    def take_back(self, dropped: list[Pending], code: ErrorCode, message: str) -> None:
        """The writer took none of `dropped`, the partition's stalled batches: their offsets
        are handed out again and their producers go back to where they were, so a batch sent
        again lands once; every answer waiting for those offsets (theirs, and a duplicate's
        sent meanwhile) gets `code` and is counted off."""
        if not dropped:
            return
        for pending in reversed(dropped):
            producer = pending.source.producer
            if producer is not None:
                if pending.before is None:
                    # Not forgotten: a producer with no state may start anywhere, and its
                    # next batch, already on its way, would land before this one.
                    self.producers[producer.producer_id] = resuming(producer)
                else:
                    self.producers[producer.producer_id] = pending.before
            self.append_times.pop(pending.base, None)
        self.next_offset = dropped[0].base
        kept = bisect.bisect_right(self._waiters, self.next_offset, key=_end)
        gone, self._waiters = self._waiters[kept:], self._waiters[:kept]
        for pending in dropped:
            _refuse(pending.outcome, code, message)
        for waiter in gone:
            if waiter.outcome is not None:
                _refuse(waiter.outcome, code, message)
            waiter.ticket.met()

    def taken(self, end: int, records: int, size: int) -> None:
        """The writer took a batch of `records` (`size` bytes) reaching offset `end`."""
        self._undurable.append((end, records, size))

    def newly_durable(self) -> tuple[int, int]:
        """Records and bytes of the taken batches durable now and not told before."""
        records = size = 0
        undurable = self._undurable
        while undurable and undurable[0][0] <= self.durable_to:
            _, count, nbytes = undurable.popleft()
            records += count
            size += nbytes
        return records, size

    def never_durable(self) -> int:
        """Nothing taken and not durable yet will be (the journal failed): how many
        records that was, forgotten."""
        records = sum(count for _, count, _ in self._undurable)
        self._undurable.clear()
        return records

    def is_durable(self, end: int) -> bool:
        return end <= self.durable_to

    def sealed(self, end: int) -> None:
        """Offsets below `end` are sealed and in the manifest (so durable too)."""
        self.sealed_to = max(self.sealed_to, end)
        self.reached(end)

    def reached(self, end: int) -> None:
        """Offsets below `end` are durable: count off the requests waiting for them."""
        if end <= self.durable_to:
            return
        self.durable_to = end
        ready = self._waiters
        if ready and ready[-1].end > end:
            done = bisect.bisect_right(ready, end, key=_end)
            ready, self._waiters = ready[:done], ready[done:]
        else:  # the common case: one journal sync makes every waiter durable
            self._waiters = []
        for waiter in ready:
            waiter.ticket.met()

    def waiting(self) -> int:
        return len(self._waiters)

    def refuse_waiters(self, code: ErrorCode, message: str) -> int:
        """Nothing waiting here will become durable (the journal failed): every request
        waiting is answered `code` and counted off; returns how many were."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if waiter.outcome is not None:
                _refuse(waiter.outcome, code, message)
            waiter.ticket.met()
        return len(waiters)

    def fail_waiters(self, error: Exception) -> None:
        """The partition is going away (shutdown): nobody waits for what will not seal. The
        requests waiting are counted off, not durable: `failure` says why."""
        self.failure = error
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.ticket.met()


_APPEND_TIMES_KEPT = 4096  # a producer's last five batches, for many producers


def _end(waiter: Waiter) -> int:
    return waiter.end


def _refuse(outcome: Outcome, code: ErrorCode, message: str) -> None:
    if outcome.error is ErrorCode.none:
        outcome.error, outcome.message = code, message
