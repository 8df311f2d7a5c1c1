"""Structured Streaming over a plateau topic: offsets are the partitions' watermarks.

A micro-batch reads whole segments sealed between two offsets, so a stream sees every
segment exactly once, in offset order per partition, and never a partial one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from plateau_core.manifest import SegmentRecord
from plateau_spark.source.filters import ScanBounds
from plateau_spark.source.options import SourceOptions
from plateau_spark.source.scan import SegmentGroup, group_segments, read_group
from plateau_spark.source.types import arrow_schema

Offsets = dict[str, int]  # partition (as text: offsets are JSON) -> next offset to read


class PlateauStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._target: Offsets | None = None  # set for trigger(availableNow=True)

    def _watermarks(self) -> Offsets:
        with self.options.open_store() as store:
            return {str(s.partition): s.next_offset for s in store.spans(self.options.topic)}

    def _segments_after(self, start: Offsets) -> list[SegmentRecord]:
        with self.options.open_store() as store:
            segments = store.manifest.segments(self.options.topic)
        return [s for s in segments if s.start_offset >= start.get(str(s.partition), 0)]

    def initialOffset(self) -> Offsets:
        if self.options.starting_offsets == "latest":
            return self._watermarks()
        with self.options.open_store() as store:
            spans = store.spans(self.options.topic)
        return {
            str(s.partition): s.next_offset if s.start_offset is None else s.start_offset
            for s in spans
        }

    def reportLatestOffset(self) -> Offsets:
        return self._watermarks()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._watermarks()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.read_limit is None:
            return ReadAllAvailable()
        kind, amount = self.options.read_limit
        if kind == "rows":
            return ReadMaxRows(amount)
        if kind == "files":
            return ReadMaxFiles(amount)
        return ReadMaxBytes(amount)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        candidates = self._segments_after(start)
        if self._target is not None:
            target = self._target
            candidates = [s for s in candidates if s.end_offset <= target.get(str(s.partition), 0)]
        admitted = _admit(candidates, limit)
        end = dict(start)
        for segment in admitted:
            key = str(segment.partition)
            end[key] = max(end.get(key, 0), segment.end_offset)
        if isinstance(limit, ReadAllAvailable):
            # Watermarks advanced by skipped offsets (no segment) move the stream on too.
            ceiling = self._target if self._target is not None else self._watermarks()
            for key, value in ceiling.items():
                end[key] = max(end.get(key, 0), value)
        return end

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        with self.options.open_store() as store:
            data_dir = store.data_dir
            segments = store.manifest.segments(self.options.topic)
        chosen = [
            s
            for s in segments
            if s.start_offset >= start.get(str(s.partition), 0)
            and s.end_offset <= end.get(str(s.partition), 0)
        ]
        return group_segments(chosen, data_dir, self.options.max_partition_bytes)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentGroup):
            return  # Spark reads one placeholder partition when planning found none
        yield from read_group(
            partition,
            ScanBounds().request(self.options.topic),
            arrow_schema(self.schema),
            self.options.trace_file,
        )

    def commit(self, end: Offsets) -> None:
        """Nothing to release: segments stay until retention removes them."""


def _admit(segments: list[SegmentRecord], limit: ReadLimit) -> list[SegmentRecord]:
    """Segments while the limit allows, oldest partition head first, so each partition is
    read as a contiguous prefix. At least one is admitted: a stream never stalls on a
    segment larger than its limit."""
    if not isinstance(limit, ReadMaxRows | ReadMaxFiles | ReadMaxBytes):
        return segments
    budget = (
        limit.max_rows
        if isinstance(limit, ReadMaxRows)
        else limit.max_files
        if isinstance(limit, ReadMaxFiles)
        else limit.max_bytes
    )
    queues: dict[int, list[SegmentRecord]] = {}
    for segment in sorted(segments, key=lambda s: (s.partition, s.start_offset), reverse=True):
        queues.setdefault(segment.partition, []).append(segment)  # popped from the end
    heads = [(q[-1].time_min, p) for p, q in queues.items()]
    heapq.heapify(heads)
    admitted: list[SegmentRecord] = []
    used = 0
    while heads:
        _, partition = heapq.heappop(heads)
        segment = queues[partition].pop()
        size = _cost(segment, limit)
        if admitted and used + size > budget:
            break
        admitted.append(segment)
        used += size
        if queues[partition]:
            heapq.heappush(heads, (queues[partition][-1].time_min, partition))
    return admitted


def _cost(segment: SegmentRecord, limit: ReadLimit) -> int:
    if isinstance(limit, ReadMaxRows):
        return segment.record_count
    if isinstance(limit, ReadMaxBytes):
        return segment.size_bytes
    return 1
