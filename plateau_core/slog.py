"""The segment log (slog) of one partition: its buffer, its roll triggers, its seal in flight.

A SegmentLog is plain state; the Writer guards it with its lock and runs its seals.
At most one seal per partition is in flight, so segments are recorded in offset order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from plateau_core.errors import InvalidInputError
from plateau_core.policies import RollPolicy
from plateau_core.producers import ProducerBatch
from plateau_core.schema import OFFSET


@dataclass
class SealJob:
    """A buffer handed to the writer pool; restored to the slog if the seal fails."""

    topic: str
    partition: int
    batches: list[pa.RecordBatch]
    rows: int
    nbytes: int
    fingerprint: str
    # Idempotent producers' batches among these records, recorded with the segment.
    producers: list[ProducerBatch] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    # When the oldest of these records was buffered (monotonic): how stale they are.
    buffered_since: float = field(default_factory=time.monotonic)


class SegmentLog:
    def __init__(
        self,
        topic: str,
        partition: int,
        directory: Path,
        roll: RollPolicy,
        watermark: int | None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.roll = roll
        # Highest offset accepted so far (buffered or sealed); the next batch must pass it.
        self.last_offset: int | None = None if watermark is None else watermark - 1
        self.batches: list[pa.RecordBatch] = []
        self.rows = 0
        self.nbytes = 0
        self.fingerprint: str | None = None
        self.producers: list[ProducerBatch] = []
        # Someone waits for what is buffered to be durable: seal it as soon as no seal is in
        # flight (group commit), whatever the roll policy says.
        self.urgent = False
        self.first_buffered_at: float | None = None
        self.in_flight: SealJob | None = None
        self.failures = 0
        self.retry_at: float | None = None
        self.last_error: str | None = None
        # Offsets below this were handled without landing (skipped); the watermark moves
        # over them once nothing below it is buffered or being written.
        self.pending_advance: int | None = None
        self.refused_nbytes = 0  # size of the batch last refused for the memory budget

    # --- questions --------------------------------------------------------------------------

    def full(self) -> bool:
        return self.rows >= self.roll.max_rows or self.nbytes >= self.roll.max_bytes

    def aged(self, now: float) -> bool:
        return (
            self.first_buffered_at is not None
            and now - self.first_buffered_at >= self.roll.max_age_s
        )

    def current_fingerprint(self) -> str | None:
        """The schema the buffer holds, or that of the seal in flight when the buffer is empty."""
        if self.fingerprint is not None:
            return self.fingerprint
        return None if self.in_flight is None else self.in_flight.fingerprint

    def can_seal(self, now: float) -> bool:
        return (
            bool(self.batches)
            and self.in_flight is None
            and (self.retry_at is None or now >= self.retry_at)
        )

    def due(self, now: float) -> bool:
        # A failed seal is retried as soon as its backoff passes, whatever the roll says.
        return self.can_seal(now) and (
            self.full() or self.aged(now) or self.failures > 0 or self.urgent
        )

    def advance_due(self) -> int | None:
        """The offset the watermark may move to now, if any."""
        if self.pending_advance is None or self.in_flight is not None:
            return None
        if self.batches and self.batches[0].column(OFFSET)[0].as_py() < self.pending_advance:
            return None
        return self.pending_advance

    def unsealed_since(self) -> float | None:
        """When the oldest record not yet sealed was buffered (monotonic), or None."""
        if self.in_flight is not None:
            return self.in_flight.buffered_since
        return self.first_buffered_at

    def busy_reason(self, fingerprint: str) -> str | None:
        """Why an append must wait for the seal in flight, or None."""
        if self.in_flight is None:
            return None
        if self.full():
            return (
                f"buffer full ({self.rows} rows, {self.nbytes} bytes) while the previous "
                f"seal of {self.in_flight.rows} rows is still being written"
            )
        current = self.current_fingerprint()
        if current is not None and current != fingerprint:
            return "a schema change waits for the previous seal to finish"
        return None

    def check_offsets(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0 or self.last_offset is None:
            return
        first = batch.column(OFFSET)[0].as_py()
        if first <= self.last_offset:
            raise InvalidInputError(
                f"{self.topic}[{self.partition}] column 'offset' starts at {first}, "
                f"not after the last accepted offset {self.last_offset}"
            )

    # --- changes ----------------------------------------------------------------------------

    def add(
        self,
        batch: pa.RecordBatch,
        fingerprint: str,
        now: float,
        producer: ProducerBatch | None = None,
    ) -> None:
        if batch.num_rows == 0:
            return
        if producer is not None:
            self.producers.append(producer)
        self.batches.append(batch)
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes
        self.fingerprint = fingerprint
        self.first_buffered_at = self.first_buffered_at or now
        self.last_offset = batch.column(OFFSET)[batch.num_rows - 1].as_py()

    def take(self) -> SealJob:
        if self.fingerprint is None:
            raise InvalidInputError("nothing buffered to seal")
        job = SealJob(
            topic=self.topic,
            partition=self.partition,
            batches=self.batches,
            rows=self.rows,
            nbytes=self.nbytes,
            fingerprint=self.fingerprint,
            producers=self.producers,
            buffered_since=self.first_buffered_at or time.monotonic(),
        )
        self.batches, self.rows, self.nbytes = [], 0, 0
        self.producers = []
        self.urgent = False
        self.fingerprint = None
        self.first_buffered_at = None
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
        self.producers = job.producers + self.producers
        self.rows += job.rows
        self.nbytes += job.nbytes
        self.fingerprint = job.fingerprint
        self.first_buffered_at = job.buffered_since
        self.in_flight = None
        self.failures += 1
        delay: float = min(30.0, backoff_s * 2 ** (self.failures - 1))
        self.retry_at = now + delay
        self.last_error = error
        return delay

    def drop(self) -> int:
        """Forget the buffer (the partition was lost); returns the bytes released."""
        released = self.nbytes
        self.batches, self.rows, self.nbytes = [], 0, 0
        self.producers = []
        self.urgent = False
        self.fingerprint = None
        self.first_buffered_at = None
        return released
