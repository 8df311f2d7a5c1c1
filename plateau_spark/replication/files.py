"""One replication task, run on a Spark executor: segments of a partition → Parquet files.

Files are laid out as `{topic}/date=YYYY-MM-DD/partition=P/{first:020d}-{last:020d}.parquet`
(dates in UTC, offsets of the first and last row in the file), so Spark's partition
discovery reads `date` and `partition` back, and a task re-run writes the same names.

A data column named `date` ignoring case is written with a `_` suffix, more when that name
is taken: Spark resolves names ignoring case, and its writer's `date` column, or the folder
value on read, would otherwise replace its values. No data column is named `partition`: such
a field is stored as `partition_`, and a segment sealed before that rule reads so too
(plateau_core.stored_names).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from plateau_core.conform import conform
from plateau_core.manifest import SegmentRecord
from plateau_core.names import fold_case
from plateau_core.read_request import ReadRequest
from plateau_core.reader import ScanCounters, segment_batches
from plateau_core.schema import OFFSET, TIMESTAMP
from plateau_spark.replication.micros import in_micros, micros_type
from plateau_spark.replication.target import Target

ROW_GROUP_ROWS = 1 << 20
DATE_FOLDER = "date"
_NAME = re.compile(r"(\d{20})-(\d{20})\.parquet")


@dataclass(frozen=True)
class ReplicaTask:
    """Neighbouring sealed segments of one partition, replicated together."""

    topic: str
    partition: int
    segments: tuple[SegmentRecord, ...]
    data_dir: str
    schema: pa.Schema  # the topic's merged schema: every file of a run has the same columns
    target: Target
    compression: str

    @property
    def start_offset(self) -> int:
        return self.segments[0].start_offset

    @property
    def end_offset(self) -> int:
        return self.segments[-1].end_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)


@dataclass(frozen=True)
class ReplicaFile:
    path: str  # relative to the target root
    rows: int
    bytes: int
    first_offset: int
    last_offset: int


def replica_columns(names: Sequence[str]) -> list[str]:
    """The names data columns `names` are written under in the replica, in order."""
    taken = {fold_case(name) for name in names}
    out = []
    for name in names:
        written = name
        if fold_case(name) == DATE_FOLDER:
            written = f"{name}_"
            while fold_case(written) in taken:
                written = f"{written}_"
            taken.add(fold_case(written))
        out.append(written)
    return out


def replica_schema(schema: pa.Schema) -> pa.Schema:
    """The columns of the replica's files: `schema`'s, renamed as `replica_columns` says,
    nanosecond timestamps in microseconds (plateau_spark.replication.micros)."""
    names = replica_columns(schema.names)
    return pa.schema(
        [
            field.with_name(name).with_type(micros_type(field.type))
            for field, name in zip(schema, names, strict=True)
        ],
        metadata=schema.metadata,
    )


def replica_dir(topic: str, day: date, partition: int) -> str:
    return f"{topic}/date={day.isoformat()}/partition={partition}"


def replica_name(topic: str, day: date, partition: int, first: int, last: int) -> str:
    return f"{replica_dir(topic, day, partition)}/{replica_file_name(first, last)}"


def replica_file_name(first: int, last: int) -> str:
    """A replica file's name in its folder: the offsets of its first and last rows."""
    return f"{first:020d}-{last:020d}.parquet"


def parse_replica_name(name: str) -> tuple[int, int] | None:
    """(first, last) offsets a replica file name encodes, or None for any other file."""
    match = _NAME.fullmatch(name)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def write_task(task: ReplicaTask) -> list[ReplicaFile]:
    """Write the task's files (one per UTC date its rows fall on) and return them."""
    filesystem = task.target.filesystem()
    written = []
    single = utc_day(min(s.time_min for s in task.segments))
    if single == utc_day(max(s.time_max for s in task.segments)):
        # The manifest's times already say every row is on one date: no pass to find dates,
        # and no date filter while writing.
        rows = sum(s.record_count for s in task.segments)
        days = {single: (task.start_offset, task.end_offset - 1, rows)}
        split = False
    else:
        days, split = _days(task), True
    for day, (first, last, rows) in sorted(days.items()):
        relative = replica_name(task.topic, day, task.partition, first, last)
        produce = partial(_write_parquet, task=task, day=day if split else None)
        size = task.target.write(filesystem, relative, produce)
        written.append(ReplicaFile(relative, rows, size, first, last))
    return written


def task_batches(
    task: ReplicaTask, columns: tuple[str, ...] | None = None
) -> Iterator[pa.RecordBatch]:
    """The rows of the task's segments, in offset order (only `columns` when given)."""
    request = ReadRequest.whole(task.topic, columns)
    counters = ScanCounters()
    for segment in task.segments:
        yield from segment_batches(Path(task.data_dir) / segment.path, segment, request, counters)


def _days(task: ReplicaTask) -> dict[date, tuple[int, int, int]]:
    """Per UTC date: (first offset, last offset, rows); reads two columns only."""
    days: dict[date, tuple[int, int, int]] = {}
    for batch in task_batches(task, (OFFSET, TIMESTAMP)):
        dates = batch.column(TIMESTAMP).cast(pa.date32())
        offsets = batch.column(OFFSET)
        for value in pc.unique(dates).to_pylist():
            mine = pc.filter(offsets, pc.equal(dates, pa.scalar(value, pa.date32())))
            bounds = pc.min_max(mine)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if value in days:
                first, last, rows = days[value]
                days[value] = (min(first, low), max(last, high), rows + len(mine))
            else:
                days[value] = (low, high, len(mine))
    return days


def utc_day(epoch_ms: int) -> date:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).date()


def pending_days(segments: Sequence[SegmentRecord]) -> list[date]:
    """Every UTC day from the segments' oldest row to their newest: where a run's files lie."""
    first = utc_day(min(s.time_min for s in segments))
    last = utc_day(max(s.time_max for s in segments))
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def _write_parquet(stream: IO[bytes], task: ReplicaTask, day: date | None) -> None:
    """The task's rows of `day` (all of them for None) as one Parquet file."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    schema = replica_schema(task.schema)
    with pq.ParquetWriter(stream, schema, compression=task.compression) as writer:
        for batch in task_batches(task):
            mine = batch
            if day is not None:
                dates = batch.column(TIMESTAMP).cast(pa.date32())
                mine = batch.filter(pc.equal(dates, pa.scalar(day, pa.date32())))
            if mine.num_rows == 0:
                continue
            conformed = [in_micros(c) for c in conform(mine, task.schema).columns]
            pending.append(pa.RecordBatch.from_arrays(conformed, schema=schema))
            rows += mine.num_rows
            if rows >= ROW_GROUP_ROWS:
                writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=rows)
                pending, rows = [], 0
        if pending:
            writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=rows)
