"""Data files of an Iceberg table written from a replication task, named by their offsets.

A task's rows go to one Parquet file per UTC day, under the table's folder:
`data/day=YYYY-MM-DD/partition=P/{first:020d}-{last:020d}.parquet` (offsets of the first
and last row). Each file holds one value of both partition fields (day(timestamp) and the
Kafka partition), which is what registering an existing file in a partitioned table asks.
The names say which rows a file holds, so a run can tell files of an uncommitted run apart
(rows at or past the table's committed offset) without reading them. Compaction, and a
column replacement that rewrites files (iceberg_migration.py), write
`{first}-{last}.c{tag}.parquet`: a new name every time, never one a snapshot still reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from functools import partial
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from plateau_core.schema import OFFSET, TIMESTAMP
from plateau_spark.replication.files import (
    ROW_GROUP_ROWS,
    ReplicaFile,
    ReplicaTask,
    task_batches,
    utc_day,
)
from plateau_spark.replication.iceberg_schema import to_table_batch
from plateau_spark.replication.target import Target

DATA_DIR = "data"
_NAME = re.compile(r"(\d{20})-(\d{20})(\.c[0-9a-f]+)?\.parquet")


def data_dir(day: date, partition: int) -> str:
    return f"{DATA_DIR}/day={day.isoformat()}/partition={partition}"


def data_name(first: int, last: int, tag: str | None = None) -> str:
    suffix = "" if tag is None else f".c{tag}"
    return f"{first:020d}-{last:020d}{suffix}.parquet"


def parse_data_name(name: str) -> tuple[int, int, bool] | None:
    """(first, last, compacted) for a file plateau wrote; None for any other file."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), match.group(3) is not None


def write_data_files(
    task: ReplicaTask, table: Target, schema: pa.Schema, min_offset: int
) -> list[ReplicaFile]:
    """Write the task's rows at or past `min_offset`, one file per UTC day; paths are
    relative to the table's folder."""
    filesystem = table.filesystem()
    written = []
    for day, (first, last, rows) in sorted(_days(task, min_offset).items()):
        relative = f"{data_dir(day, task.partition)}/{data_name(first, last)}"
        produce = partial(_write_day, task=task, schema=schema, day=day, min_offset=min_offset)
        size = table.write(filesystem, relative, produce)
        written.append(ReplicaFile(relative, rows, size, first, last))
    return written


def _rows(
    task: ReplicaTask, min_offset: int, columns: tuple[str, ...] | None = None
) -> Iterator[pa.RecordBatch]:
    for batch in task_batches(task, columns):
        kept = batch
        if min_offset > task.start_offset:
            # Rows another writer already committed (segment bounds differ between stores).
            kept = batch.filter(pc.greater_equal(batch.column(OFFSET), min_offset))
        if kept.num_rows:
            yield kept


def _days(task: ReplicaTask, min_offset: int) -> dict[date, tuple[int, int, int]]:
    """Per UTC day: (first offset, last offset, rows)."""
    single = utc_day(min(s.time_min for s in task.segments))
    if min_offset <= task.start_offset and single == utc_day(
        max(s.time_max for s in task.segments)
    ):
        # The manifest already says every row is on one day: no pass over the data.
        rows = sum(s.record_count for s in task.segments)
        return {single: (task.start_offset, task.end_offset - 1, rows)}
    days: dict[date, tuple[int, int, int]] = {}
    for batch in _rows(task, min_offset, (OFFSET, TIMESTAMP)):
        dates = batch.column(TIMESTAMP).cast(pa.date32())
        for value in pc.unique(dates).to_pylist():
            mine = pc.filter(batch.column(OFFSET), pc.equal(dates, pa.scalar(value, pa.date32())))
            bounds = pc.min_max(mine)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            first, last, rows = days.get(value, (low, high, 0))
            days[value] = (min(first, low), max(last, high), rows + len(mine))
    return days


def _write_day(
    stream: IO[bytes], task: ReplicaTask, schema: pa.Schema, day: date, min_offset: int
) -> None:
    pending: list[pa.RecordBatch] = []
    rows = 0
    with pq.ParquetWriter(stream, schema, compression=task.compression) as writer:
        for batch in _rows(task, min_offset):
            dates = batch.column(TIMESTAMP).cast(pa.date32())
            mine = batch.filter(pc.equal(dates, pa.scalar(day, pa.date32())))
            if mine.num_rows == 0:
                continue
            pending.append(to_table_batch(mine, task.partition, schema))
            rows += mine.num_rows
            if rows >= ROW_GROUP_ROWS:
                writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=rows)
                pending, rows = [], 0
        if pending:
            writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=rows)
