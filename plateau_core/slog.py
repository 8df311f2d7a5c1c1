"""The segment log (slog) of one partition: its buffer, its roll triggers, its seal in flight.

A SegmentLog is plain state; the Writer guards it with its lock and runs its seals.
At most one seal per partition is in flight, so segments are recorded in offset order.

What one seal of a partition records is a SealJob: its buffered batches (one segment file
per run of one schema), the watermark move over offsets handled without landing, and the
idempotent producers' batches among them. The manifest records all of it in one
transaction, together with the jobs of the partitions it is linked to (records that must
become durable together, such as a batch and its dead letters in another partition).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from plateau_core.errors import InvalidInputError
from plateau_core.lazy import Item, span
from plateau_core.listener import TopicPartition
from plateau_core.policies import IndexPolicy, RollPolicy
from plateau_core.producers import ProducerBatch
from plateau_core.rollup import RollupPolicy
from plateau_core.schema import INT64_MAX, normalized


@dataclass(frozen=True)
class Append:
    """One partition's share of an append_group: record batches (in offset order; lazy records,
    plateau_core.lazy, are built into rows when sealed), the idempotent producer batch they are
    (recorded with them), and `advance_to`: offsets below it that are not appended were
    handled elsewhere (skipped, dead-lettered), so the watermark moves over them. `urgent`:
    someone waits until these are durable, so seal as soon as possible."""

    topic: str
    partition: int
    batches: Sequence[Item] = ()
    producer: ProducerBatch | None = None
    advance_to: int | None = None
    urgent: bool = False

    def __post_init__(self) -> None:
        # A watermark below 0 would have the partition's next reader start before any
        # offset Kafka hands out; offsets past int64 no segment can record.
        if self.advance_to is not None and not 0 <= self.advance_to <= INT64_MAX:
            raise InvalidInputError(
                f"{self.topic}[{self.partition}]: advance_to {self.advance_to} is not an "
                "offset (0 to 2**63 - 1)"
            )


class Prepared(NamedTuple):
    """A batch checked and normalized for its segment (or lazy records), with its schema's
    fingerprint and its size (both asked for more than once; working out a batch's size is
    not free)."""

    batch: Item
    fingerprint: str
    nbytes: int


def prepare(item: Item) -> Prepared:
    """A batch normalized for its segment (lazy records are built normalized)."""
    if isinstance(item, pa.RecordBatch):
        batch, fingerprint = normalized(item)
        return Prepared(batch, fingerprint, batch.nbytes)
    if isinstance(item, pa.Table):
        raise InvalidInputError(
            "a batch must be a pyarrow.RecordBatch, not a pyarrow.Table: append each of "
            "table.to_batches()"
        )
    return Prepared(item, item.fingerprint, item.nbytes)


@dataclass
class SealJob:
    """A buffer handed to the writer pool; restored to the slog if the seal fails."""

    topic: str
    partition: int
    batches: list[Item]
    fingerprints: list[str]  # each batch's schema
    rows: int
    nbytes: int
    # Idempotent producers' batches among these records (or among the offsets skipped).
    producers: list[ProducerBatch] = field(default_factory=list)
    # The watermark moves at least here (offsets below it that land nowhere: poison).
    advance_to: int | None = None
    index: IndexPolicy = field(default_factory=IndexPolicy)
    rollups: tuple[RollupPolicy, ...] = ()
    started: float = field(default_factory=time.monotonic)
    # When the oldest of these records was buffered (monotonic): how stale they are.
    buffered_since: float = field(default_factory=time.monotonic)
    # The first journal group among these (None: not journaled).
    journal_from: int | None = None
    # Its commit may have landed (an earlier attempt's outcome was unknown): retried as it
    # is until it is recorded, whatever fails meanwhile. Merged with later records, it would
    # be written over the file the manifest may name, and refused as a conflict forever.
    exact: bool = False

    @property
    def key(self) -> TopicPartition:
        return self.topic, self.partition

    def runs(self) -> list[list[Item]]:
        """The batches split where the schema changes: each run is one segment file."""
        runs: list[list[Item]] = []
        previous = None
        for batch, schema_id in zip(self.batches, self.fingerprints, strict=True):
            if schema_id != previous:
                runs.append([])
                previous = schema_id
            runs[-1].append(batch)
        return runs


class SegmentLog:
    def __init__(
        self,
        topic: str,
        partition: int,
        directory: Path,
        roll: RollPolicy,
        watermark: int | None,
        *,
        index: IndexPolicy | None = None,
        rollups: tuple[RollupPolicy, ...] = (),
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.roll = roll
        self.index = index or IndexPolicy()
        self.rollups = rollups
        # Highest offset accepted so far (buffered or sealed); the next batch must pass it.
        self.last_offset: int | None = None if watermark is None else watermark - 1
        self.batches: list[Item] = []
        self.fingerprints: list[str] = []
        self.rows = 0
        self.nbytes = 0
        self.producers: list[ProducerBatch] = []
        # Offsets below this were handled without landing (skipped, dead-lettered); the
        # watermark moves over them with the next seal of this partition.
        self.pending_advance: int | None = None
        # Partitions whose buffered records must be recorded in the same transaction as
        # this one's (appended together by append_group).
        self.links: set[TopicPartition] = set()
        # Someone waits for what is buffered to be durable: seal it as soon as no seal is in
        # flight (group commit), whatever the roll policy says.
        self.urgent = False
        self.first_buffered_at: float | None = None
        self.in_flight: SealJob | None = None
        # A seal whose commit may have landed (its outcome unknown): retried exactly as it
        # was, never merged with records buffered since, so that its retry writes the same
        # file and finds its own commit (anything else would rewrite a recorded file).
        self.exact: SealJob | None = None
        self.failures = 0
        self.retry_at: float | None = None
        self.last_error: str | None = None
        self.refused_nbytes = 0  # size of the batch last refused for the memory budget
        self.journal_from: int | None = None  # first journal group buffered here
        self.journal_last: int | None = None  # the last one appended here

    @property
    def key(self) -> TopicPartition:
        return self.topic, self.partition

    # --- questions --------------------------------------------------------------------------

    def full(self) -> bool:
        return self.rows >= self.roll.max_rows or self.nbytes >= self.roll.max_bytes

    def aged(self, now: float) -> bool:
        return (
            self.first_buffered_at is not None
            and now - self.first_buffered_at >= self.roll.max_age_s
        )

    def pending(self) -> bool:
        """Anything to record: buffered rows, a watermark move, producer batches."""
        return (
            bool(self.batches)
            or self.pending_advance is not None
            or bool(self.producers)
            or self.exact is not None
        )

    def can_seal(self, now: float) -> bool:
        return (
            self.pending()
            and self.in_flight is None
            and (self.retry_at is None or now >= self.retry_at)
        )

    def due(self, now: float) -> bool:
        # A failed seal is retried as soon as its backoff passes, whatever the roll says. A
        # watermark move alone has nothing to wait for.
        return self.can_seal(now) and (
            self.full() or self.aged(now) or self.failures > 0 or self.urgent or not self.batches
        )

    def unsealed_since(self) -> float | None:
        """When the oldest record not yet sealed was buffered (monotonic), or None."""
        if self.in_flight is not None:
            return self.in_flight.buffered_since
        return self.first_buffered_at

    def busy_reason(self) -> str | None:
        """Why an append must wait for the seal in flight, or None."""
        if self.in_flight is not None and self.full():
            return (
                f"buffer full ({self.rows} rows, {self.nbytes} bytes) while the previous "
                f"seal of {self.in_flight.rows} rows is still being written"
            )
        return None

    def check_offsets(self, batch: Item, after: int | None) -> int | None:
        """Check that `batch` starts after offset `after` (the last accepted, None: any);
        returns the batch's last offset, the next batch's `after`."""
        found = span(batch)
        if found is None:
            return after
        first, last = found
        if after is not None and first <= after:
            raise InvalidInputError(
                f"{self.topic}[{self.partition}] column 'offset' starts at {first}, "
                f"not after the last accepted offset {after}"
            )
        return last

    # --- changes ----------------------------------------------------------------------------

    def add(self, prepared: Prepared, now: float) -> None:
        batch = prepared.batch
        found = span(batch)
        if found is None:
            return
        self.batches.append(batch)
        self.fingerprints.append(prepared.fingerprint)
        self.rows += batch.num_rows
        self.nbytes += prepared.nbytes
        self.first_buffered_at = self.first_buffered_at or now
        self.last_offset = found[1]

    def advance(self, next_offset: int) -> bool:
        """Offsets below `next_offset` not appended were handled elsewhere; False when there
        is nothing to move over (they are behind what was accepted already)."""
        if self.last_offset is not None and next_offset <= self.last_offset + 1:
            return False
        self.last_offset = next_offset - 1
        self.pending_advance = next_offset
        return True

    def take(self) -> SealJob:
        if not self.pending():
            raise InvalidInputError("nothing buffered to seal")
        if self.exact is not None:
            job, self.exact = self.exact, None
            self.in_flight = job
            return job
        job = SealJob(
            topic=self.topic,
            partition=self.partition,
            batches=self.batches,
            fingerprints=self.fingerprints,
            rows=self.rows,
            nbytes=self.nbytes,
            producers=self.producers,
            advance_to=self.pending_advance,
            index=self.index,
            rollups=self.rollups,
            buffered_since=self.first_buffered_at or time.monotonic(),
            journal_from=self.journal_from,
        )
        self._clear()
        self.in_flight = job
        return job

    def sealed(self) -> None:
        self.in_flight = None
        self.failures = 0
        self.retry_at = None
        self.last_error = None

    def restore(self, job: SealJob, error: str, backoff_s: float, now: float) -> float:
        """Put a failed seal's records back in front of the buffer; returns the retry delay."""
        self.batches = job.batches + self.batches
        self.fingerprints = job.fingerprints + self.fingerprints
        self.producers = job.producers + self.producers
        self.rows += job.rows
        self.nbytes += job.nbytes
        if job.advance_to is not None and (
            self.pending_advance is None or job.advance_to > self.pending_advance
        ):
            self.pending_advance = job.advance_to
        self.first_buffered_at = job.buffered_since
        if job.journal_from is not None:
            # The job's records came first, so its first group is the lower one.
            self.journal_from = job.journal_from
        return self._failed(error, backoff_s, now)

    def _failed(self, error: str, backoff_s: float, now: float) -> float:
        self.in_flight = None
        self.failures += 1
        delay: float = min(30.0, backoff_s * 2 ** (self.failures - 1))
        self.retry_at = now + delay
        self.last_error = error
        return delay

    def hold_exact(self, job: SealJob, error: str, backoff_s: float, now: float) -> float:
        """Keep a seal whose commit outcome is unknown for a retry as it was; returns the
        retry delay."""
        job.exact = True
        self.exact = job
        if job.journal_from is not None:
            held = self.journal_from
            self.journal_from = job.journal_from if held is None else min(held, job.journal_from)
        return self._failed(error, backoff_s, now)

    def drop(self) -> int:
        """Forget the buffer (the partition was lost); returns the bytes released."""
        released = self.nbytes + (0 if self.exact is None else self.exact.nbytes)
        self.exact = None
        self._clear()
        return released

    def _clear(self) -> None:
        self.batches, self.fingerprints, self.rows, self.nbytes = [], [], 0, 0
        self.producers = []
        self.pending_advance = None
        self.urgent = False
        self.first_buffered_at = None
        self.links = set()
        self.journal_from = None


def check_order(
    appends: Sequence[Append], slogs: Sequence[SegmentLog], batches: Sequence[Sequence[Prepared]]
) -> None:
    """Raise InvalidInputError unless every partition's batches (several appends may name one
    partition) follow what it accepted already and each other, in offset order."""
    after: dict[TopicPartition, int | None] = {}
    for append, slog, appended in zip(appends, slogs, batches, strict=True):
        last = after.get(slog.key, slog.last_offset)
        for prepared in appended:
            last = slog.check_offsets(prepared.batch, last)
        if append.advance_to is not None:
            last = max(last if last is not None else -1, append.advance_to - 1)
        after[slog.key] = last
