"""What every decoder shares: its result, and the poison records that did not decode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa


@dataclass(frozen=True)
class Poison:
    """A record that could not be decoded: its row in the envelope, its offset, the reason."""

    row: int
    offset: int
    error: str


@dataclass
class Decoded:
    """Rows to append (one batch per schema, in offset order) and the poison records."""

    batches: list[pa.RecordBatch] = field(default_factory=list)
    poison: list[Poison] = field(default_factory=list)


class Decoder(Protocol):
    def decode(self, records: pa.RecordBatch) -> Decoded:
        """Decode the records (an envelope batch) of one partition, in offset order."""
        ...

    def seed(self, stored: pa.Schema) -> None:
        """The plateau topic's columns so far (from its segments), before the first decode."""
        ...


def poison_at(records: pa.RecordBatch, row: int, error: str) -> Poison:
    return Poison(row, records.column("offset")[row].as_py(), error)
