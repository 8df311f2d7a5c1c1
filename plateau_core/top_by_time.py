"""Rows ordered by timestamp across segments and partitions (`ORDER BY timestamp DESC LIMIT
k`), reading as few segments as the manifest's time spans allow.

Segments are read newest first (by their newest row) for a descending order, oldest first
(by their oldest row) for an ascending one. Once k rows are held, the k-th timestamp is a
threshold no row outside the answer can pass: a segment whose whole span lies beyond it is
never opened, and inside the segments still read, batches (by the footer's index) and rows
beyond it are skipped. Rows tied with the threshold are kept until the end, so the answer has
the k best timestamps exactly; which of several rows tied at the k-th timestamp are returned
is not specified, as in SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from plateau_core.conform import UnrepresentableValueError, conform
from plateau_core.manifest import SegmentRecord
from plateau_core.schema import OFFSET, TIMESTAMP

Order = Literal["asc", "desc"]
# Reads a segment's rows that pass the request and lie at or beyond a threshold (epoch ms;
# None: no threshold yet), as raw batches of the segment's own schema.
ReadSegment = Callable[[SegmentRecord, int | None], Iterator[pa.RecordBatch]]


def time_ordered(segments: Sequence[SegmentRecord], order: Order) -> list[SegmentRecord]:
    """The order segments are read in: the likeliest holders of the first rows first."""
    if order == "desc":
        return sorted(segments, key=lambda s: (-s.time_max, s.partition, -s.start_offset))
    return sorted(segments, key=lambda s: (s.time_min, s.partition, s.start_offset))


def top_by_time(
    segments: Sequence[SegmentRecord],
    read: ReadSegment,
    schema: pa.Schema,
    limit: int | None,
    order: Order,
) -> pa.Table:
    """The `limit` rows (all, for None) first in timestamp `order` (ties: offset, the same
    way), as one table of `schema`, which must hold the timestamp and offset columns.

    `segments` must come in `time_ordered` order.
    """
    keys = [(TIMESTAMP, _direction(order)), (OFFSET, _direction(order))]
    best = schema.empty_table()
    if limit == 0:
        return best
    threshold: int | None = None
    for segment in segments:
        if threshold is not None and _beyond(segment, threshold, order):
            break  # this one and every later one lies wholly beyond the k-th row
        try:
            fresh = [conform(batch, schema) for batch in read(segment, threshold)]
        except UnrepresentableValueError as exc:
            raise exc.in_segment(segment) from exc
        if not fresh:
            continue
        best = pa.Table.from_batches([*best.to_batches(), *fresh], schema=schema)
        if limit is not None and best.num_rows >= limit:
            if best.num_rows > limit:
                best = best.take(pc.select_k_unstable(best, limit, sort_keys=keys))
            bounds = pc.min_max(best.column(TIMESTAMP).cast(pa.int64()))
            threshold = bounds["min" if order == "desc" else "max"].as_py()
    return best.sort_by(keys)


def _direction(order: Order) -> Literal["ascending", "descending"]:
    return "descending" if order == "desc" else "ascending"


def _beyond(segment: SegmentRecord, threshold: int, order: Order) -> bool:
    if order == "desc":
        return segment.time_max < threshold
    return segment.time_min > threshold
