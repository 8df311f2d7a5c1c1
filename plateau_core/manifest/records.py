"""Manifest rows as plain frozen values, detached from the database session."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from plateau_core.checksums import Checksums
from plateau_core.manifest.models import SegmentRow, SegmentState
from plateau_core.producers import ProducerBatch
from plateau_core.segment_stats import SegmentStats

if TYPE_CHECKING:
    import pyarrow as pa


def now_ms() -> int:
    """The wall clock in epoch milliseconds, as the manifest records times."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class SegmentFile:
    """A sealed segment file to record: where it is (relative to the data folder) and what
    it holds."""

    stats: SegmentStats
    path: str
    schema: pa.Schema


@dataclass(frozen=True)
class PartitionCommit:
    """What one seal of a partition records, all in one transaction: its segment files in
    offset order, the watermark move over offsets that landed nowhere (`advance_to`), and the
    idempotent producers' batches among them."""

    topic: str
    partition: int
    segments: tuple[SegmentFile, ...] = ()
    producers: tuple[ProducerBatch, ...] = ()
    advance_to: int | None = None

    @property
    def end_offset(self) -> int | None:
        """Where the watermark is once this is recorded (None: it does not move it)."""
        ends = [s.stats.end_offset for s in self.segments[-1:]]
        if self.advance_to is not None:
            ends.append(self.advance_to)
        return max(ends, default=None)

    def describe(self) -> str:
        starts = ",".join(str(s.stats.start_offset) for s in self.segments)
        return f"{self.topic}[{self.partition}]@{starts or self.advance_to}"


@dataclass(frozen=True)
class SegmentRecord:
    """One manifest row, detached from the database session."""

    id: int
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    record_count: int
    time_min: int
    time_max: int
    size_bytes: int
    path: str
    schema_fingerprint: str
    state: SegmentState
    created_at: int
    replicated_at: int | None
    deleting_at: int | None
    problem: str | None
    checksums_json: str | None = None

    @property
    def located(self) -> str:
        """The file and what it holds, for a message naming the segment."""
        return (
            f"{self.path} (partition {self.partition}, "
            f"offsets [{self.start_offset}, {self.end_offset}))"
        )

    @cached_property
    def checksums(self) -> Checksums | None:
        """Parsed on first use: planning a read lists many rows and checks few of them.

        Raises ChecksumFormatError when the recorded text cannot be parsed."""
        return None if self.checksums_json is None else Checksums.from_json(self.checksums_json)

    @property
    def stats(self) -> SegmentStats:
        """The row's facts about its file (offsets, times, size, schema, checksums)."""
        return SegmentStats(
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            record_count=self.record_count,
            time_min=self.time_min,
            time_max=self.time_max,
            size_bytes=self.size_bytes,
            schema_fingerprint=self.schema_fingerprint,
            checksums=self.checksums,
        )

    @classmethod
    def from_row(cls, row: Any) -> SegmentRecord:
        """From a row of RECORD_COLUMNS, in that order (a plain tuple: cheaper than an ORM
        object when a read plans over thousands of segments)."""
        (id_, topic, partition, start, end, count, tmin, tmax, size, path, fp, state, *rest) = row
        created, replicated, deleting, problem, checksums = rest
        return cls(
            id=id_,
            topic=topic,
            partition=partition,
            start_offset=start,
            end_offset=end,
            record_count=count,
            time_min=tmin,
            time_max=tmax,
            size_bytes=size,
            path=path,
            schema_fingerprint=fp,
            state=SegmentState(state),
            created_at=created,
            replicated_at=replicated,
            deleting_at=deleting,
            problem=problem,
            checksums_json=checksums,
        )

    @classmethod
    def of(cls, row: SegmentRow) -> SegmentRecord:
        return cls(
            id=row.id,
            topic=row.topic,
            partition=row.partition,
            start_offset=row.start_offset,
            end_offset=row.end_offset,
            record_count=row.record_count,
            time_min=row.time_min,
            time_max=row.time_max,
            size_bytes=row.size_bytes,
            path=row.path,
            schema_fingerprint=row.schema_fingerprint,
            state=SegmentState(row.state),
            created_at=row.created_at,
            replicated_at=row.replicated_at,
            deleting_at=row.deleting_at,
            problem=row.problem,
            checksums_json=row.checksums,
        )


RECORD_COLUMNS = (
    SegmentRow.id,
    SegmentRow.topic,
    SegmentRow.partition,
    SegmentRow.start_offset,
    SegmentRow.end_offset,
    SegmentRow.record_count,
    SegmentRow.time_min,
    SegmentRow.time_max,
    SegmentRow.size_bytes,
    SegmentRow.path,
    SegmentRow.schema_fingerprint,
    SegmentRow.state,
    SegmentRow.created_at,
    SegmentRow.replicated_at,
    SegmentRow.deleting_at,
    SegmentRow.problem,
    SegmentRow.checksums,
)


@dataclass(frozen=True)
class PartitionSpan:
    """A partition's watermark and what its readable segments cover."""

    topic: str
    partition: int
    next_offset: int
    replicated_offset: int
    segments: int
    records: int
    bytes: int
    start_offset: int | None
    time_min: int | None
    time_max: int | None
