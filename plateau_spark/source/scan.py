"""Input partitions (groups of neighbouring segments) and how an executor reads one."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from plateau_core.manifest import SegmentRecord
from plateau_core.reader import ReadRequest, ScanCounters, segment_batches
from plateau_core.schema import conform
from plateau_spark.source.types import PARTITION


class SegmentGroup(InputPartition):
    """One Spark task: segments in (partition, offset) order, and the data folder they are
    in (as the driver resolved it; executors must see the same path)."""

    def __init__(self, segments: tuple[SegmentRecord, ...], data_dir: Path) -> None:
        super().__init__(segments)
        self.segments = segments
        self.data_dir = data_dir


def group_segments(
    segments: Iterable[SegmentRecord],
    data_dir: Path,
    max_bytes: int,
    request: ReadRequest | None = None,
) -> list[SegmentGroup]:
    """Neighbouring segments (in partition, offset order) share a task while the bytes the
    task reads stay under `max_bytes`; a larger segment is a task of its own. With a
    `request`, a segment counts only for the part of it the filters leave, so a narrow
    query becomes a few tasks instead of one per segment: each task has a fixed cost."""
    ordered = sorted(segments, key=lambda s: (s.partition, s.start_offset))
    groups: list[SegmentGroup] = []
    current: list[SegmentRecord] = []
    size = 0
    for segment in ordered:
        cost = _read_bytes(segment, request)
        if current and size + cost > max_bytes:
            groups.append(SegmentGroup(tuple(current), data_dir))
            current, size = [], 0
        current.append(segment)
        size += cost
    if current:
        groups.append(SegmentGroup(tuple(current), data_dir))
    return groups


def _read_bytes(segment: SegmentRecord, request: ReadRequest | None) -> int:
    """The segment's bytes, scaled by the share of its offsets and times the request keeps
    (rows are assumed spread evenly; the per-batch index makes reads follow that share)."""
    if request is None:
        return segment.size_bytes
    share = min(
        _overlap(
            segment.start_offset, segment.end_offset, request.start_offset, request.end_offset
        ),
        _overlap(segment.time_min, segment.time_max + 1, request.time_start, request.time_end),
    )
    return max(1, int(segment.size_bytes * share))


def _overlap(lo: int, hi: int, start: int | None, end: int | None) -> float:
    first = lo if start is None else max(lo, start)
    last = hi if end is None else min(hi, end)
    return max(0, last - first) / max(1, hi - lo)


def read_group(
    group: SegmentGroup,
    request: ReadRequest,
    schema: pa.Schema,
    trace_file: str | None,
) -> Iterator[pa.RecordBatch]:
    """The group's rows passing `request`, as batches of exactly `schema` (the Arrow form
    of the DataFrame schema, `partition` included)."""
    body = pa.schema([f for f in schema if f.name != PARTITION])
    for segment in group.segments:
        counters = ScanCounters()
        number = pa.scalar(segment.partition, pa.int32())
        for batch in segment_batches(group.data_dir / segment.path, segment, request, counters):
            conformed = conform(batch, body)
            columns = [
                pa.repeat(number, batch.num_rows)
                if f.name == PARTITION
                else conformed.column(f.name)
                for f in schema
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)
        if trace_file:
            _trace(trace_file, segment, counters)


def _trace(trace_file: str, segment: SegmentRecord, counters: ScanCounters) -> None:
    """One JSON line per segment opened; a single O_APPEND write keeps lines whole when
    several executors share the file."""
    line = json.dumps(
        {
            "segment": segment.path,
            "partition": segment.partition,
            "batches_read": counters.batches_read,
            "batches_skipped": counters.batches_skipped,
        }
    )
    fd = os.open(trace_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
