"""Idempotent producers: what the store remembers of each producer's recent batches, so that a
batch sent again (after a timeout, a lost connection or a crash) is answered with the offsets
it got the first time instead of being stored twice.

A producer is a (producer id, epoch) pair; each of its batches to a partition carries the
sequence numbers of its first and last record, one more than the previous batch's last. The
store keeps, per partition and producer, the epoch and the last few batches; the manifest
records them in the same transaction as the segment holding those batches, so "stored" and
"known to be stored" can never part.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from plateau_core.errors import InvalidInputError

# Kafka's producers keep at most five batches in flight per partition, so a retry is always
# one of the last five.
REMEMBERED_BATCHES = 5
SEQUENCE_MAX = 2**31 - 1


class ProducerBatch(NamedTuple):
    """One batch a producer appended to a partition, with where it landed. A tuple: the Kafka
    API makes one per produced batch and compares it with the producer's last five, which
    as a frozen dataclass was a few percent of the listener's time (docs/benchmarks.md)."""

    producer_id: int
    epoch: int
    first_sequence: int
    last_sequence: int
    base_offset: int

    def as_list(self) -> list[int]:
        return [self.first_sequence, self.last_sequence, self.base_offset]


class Verdict(Enum):
    NEW = "new"  # append it
    DUPLICATE = "duplicate"  # answer with the original offsets, append nothing
    OUT_OF_ORDER = "out_of_order"  # a gap in the sequence: refuse
    FENCED = "fenced"  # an older epoch than the producer's current one: refuse


@dataclass(frozen=True)
class Check:
    verdict: Verdict
    base_offset: int | None = None  # DUPLICATE: where the batch landed the first time
    detail: str = ""


# The verdict of nearly every batch; frozen, so one will do (not one per batch).
_NEW = Check(Verdict.NEW)


@dataclass(frozen=True)
class ProducerState:
    """A producer's epoch and last batches on one partition, oldest first."""

    producer_id: int
    epoch: int
    batches: tuple[ProducerBatch, ...] = ()
    # Without batches: where the producer's next batch must start. Its batch was taken back
    # before it landed and will be sent again; a later one of it must not land first.
    resume_at: int | None = None

    @property
    def last_sequence(self) -> int | None:
        return self.batches[-1].last_sequence if self.batches else None

    def check(self, epoch: int, first_sequence: int, last_sequence: int) -> Check:
        """What to do with a batch of this producer carrying these sequence numbers."""
        if epoch < self.epoch:
            return Check(
                Verdict.FENCED,
                detail=f"producer {self.producer_id} epoch {epoch} is older than {self.epoch}",
            )
        if epoch > self.epoch:
            # A bumped epoch starts its sequences again at 0.
            if first_sequence == 0:
                return _NEW
            return Check(
                Verdict.OUT_OF_ORDER,
                detail=f"epoch {epoch} must start at sequence 0, not {first_sequence}",
            )
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return Check(Verdict.DUPLICATE, base_offset=batch.base_offset)
        expected = (
            self.resume_at
            if not self.batches and self.resume_at is not None
            else next_sequence(self.last_sequence)
        )
        if first_sequence == expected:
            return _NEW
        return Check(
            Verdict.OUT_OF_ORDER,
            detail=f"producer {self.producer_id} sent sequence {first_sequence}, "
            f"expected {expected}",
        )

    def with_batch(self, batch: ProducerBatch) -> ProducerState:
        """This state after `batch` landed (a new epoch forgets the old one's batches); the
        same batch recorded twice is remembered once."""
        if batch.epoch == self.epoch and batch in self.batches:
            return self
        kept = self.batches if batch.epoch == self.epoch else ()
        # Built directly, not with dataclasses.replace: once per produced batch.
        return ProducerState(self.producer_id, batch.epoch, (*kept, batch)[-REMEMBERED_BATCHES:])


def check(
    state: ProducerState | None, epoch: int, first_sequence: int, last_sequence: int
) -> Check:
    """What to do with a batch, given the producer's state on the partition (None: nothing
    of this producer is known there). A producer with no state may start at any sequence,
    as Kafka's brokers take it: one forgotten after `producer_expiry` of silence goes on
    from where it was, and refused it could not go on at all (librdkafka stops for good)."""
    if state is not None:
        return state.check(epoch, first_sequence, last_sequence)
    return _NEW


def next_sequence(last: int | None) -> int:
    """The sequence the next batch must start at; sequences wrap after 2**31 - 1."""
    if last is None:
        return 0
    return 0 if last == SEQUENCE_MAX else last + 1


def resuming(batch: ProducerBatch) -> ProducerState:
    """The state of a producer nothing of which is known but `batch`, which did not land: its
    next batch must be `batch` again."""
    return ProducerState(batch.producer_id, batch.epoch, resume_at=batch.first_sequence)


def first_state(batch: ProducerBatch) -> ProducerState:
    return ProducerState(batch.producer_id, batch.epoch, (batch,))


def merged(states: dict[int, ProducerState], batches: Iterable[ProducerBatch]) -> None:
    """Add `batches` (in append order) to `states`, keyed by producer id, in place."""
    for batch in batches:
        current = states.get(batch.producer_id)
        states[batch.producer_id] = (
            first_state(batch) if current is None else current.with_batch(batch)
        )


def batches_json(batches: Sequence[ProducerBatch]) -> str:
    return json.dumps([b.as_list() for b in batches], separators=(",", ":"))


def batches_of(producer_id: int, epoch: int, text: str) -> tuple[ProducerBatch, ...]:
    """The batches recorded as `batches_json` gave them."""
    try:
        rows = json.loads(text)
        return tuple(
            ProducerBatch(producer_id, epoch, int(first), int(last), int(base))
            for first, last, base in rows
        )
    except (ValueError, TypeError) as exc:
        raise InvalidInputError(
            f"producer {producer_id}'s recorded batches are unreadable: {exc}"
        ) from exc
