"""Spark's pushed filters on `partition`, `offset` and `timestamp`, as segment bounds.

Everything is kept as half-open integer ranges plus optional exact sets (a SQL IN), in the
units the manifest stores: offsets, and epoch milliseconds for time. Spark's timestamps are
microseconds; the conversion keeps `<`, `<=`, `>`, `>=` and `=` exact for millisecond data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from plateau_core.manifest import SegmentRecord
from plateau_core.reader import ReadRequest
from plateau_core.schema import OFFSET, TIMESTAMP
from plateau_spark.source.types import PARTITION

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COLUMNS = (PARTITION, OFFSET, TIMESTAMP)


@dataclass(frozen=True)
class Range:
    """lo <= x < hi (None: unbounded), optionally x in `values`."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[int] | None = None

    def narrow(self, lo: int | None = None, hi: int | None = None) -> Range:
        new_lo = lo if self.lo is None else self.lo if lo is None else max(self.lo, lo)
        new_hi = hi if self.hi is None else self.hi if hi is None else min(self.hi, hi)
        return replace(self, lo=new_lo, hi=new_hi)

    def only(self, values: Iterable[int]) -> Range:
        chosen = frozenset(values)
        if self.values is not None:
            chosen &= self.values
        return replace(self, values=chosen)

    def settled(self) -> Range:
        """Bounds tightened to the set's extent, and the set to the bounds."""
        if self.values is None:
            return self
        inside = frozenset(
            v
            for v in self.values
            if (self.lo is None or v >= self.lo) and (self.hi is None or v < self.hi)
        )
        if not inside:
            return Range(0, 0, frozenset())
        return Range(min(inside), max(inside) + 1, inside)

    @property
    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo >= self.hi

    def __contains__(self, value: int) -> bool:
        return (
            (self.lo is None or value >= self.lo)
            and (self.hi is None or value < self.hi)
            and (self.values is None or value in self.values)
        )


@dataclass(frozen=True)
class ScanBounds:
    """The conjunction of the filters plateau took over from Spark."""

    partitions: Range = Range()
    offsets: Range = Range()
    times: Range = Range()  # epoch ms

    @property
    def empty(self) -> bool:
        return self.partitions.empty or self.offsets.empty or self.times.empty

    def admits(self, segment: SegmentRecord) -> bool:
        """Whether the segment may hold a matching row (the manifest query already applied
        the ranges; this adds the partition choice and the IN sets)."""
        if segment.partition not in self.partitions:
            return False
        offsets, times = self.offsets.values, self.times.values
        if offsets is not None and not any(
            segment.start_offset <= v < segment.end_offset for v in offsets
        ):
            return False
        return times is None or any(segment.time_min <= v <= segment.time_max for v in times)

    def request(self, topic: str) -> ReadRequest:
        offsets, times = self.offsets.settled(), self.times.settled()
        return ReadRequest(
            topic=topic,
            partitions=None,  # partitions are chosen per segment, see `admits`
            start_offset=offsets.lo,
            end_offset=offsets.hi,
            time_start=times.lo,
            time_end=times.hi,
            columns=None,
            limit=None,
            order="asc",
            offsets_in=offsets.values,
            times_in=times.values,
        )


def push(filters: Iterable[Filter]) -> tuple[ScanBounds, list[Filter]]:
    """(bounds of the filters plateau applies, the filters left for Spark)."""
    bounds = ScanBounds()
    rejected: list[Filter] = []
    for f in filters:
        taken = _apply(bounds, f)
        if taken is None:
            rejected.append(f)
        else:
            bounds = taken
    return bounds, rejected


def _apply(bounds: ScanBounds, f: Filter) -> ScanBounds | None:
    attribute = getattr(f, "attribute", None)
    if attribute is None or len(attribute) != 1 or attribute[0] not in _COLUMNS:
        return None
    column = attribute[0]
    if isinstance(f, IsNotNull):
        return bounds  # these columns are never null
    current = {PARTITION: bounds.partitions, OFFSET: bounds.offsets, TIMESTAMP: bounds.times}[
        column
    ]
    narrowed = _narrow(current, f, column == TIMESTAMP)
    if narrowed is None:
        return None
    if column == PARTITION:
        return replace(bounds, partitions=narrowed)
    if column == OFFSET:
        return replace(bounds, offsets=narrowed)
    return replace(bounds, times=narrowed)


def _narrow(current: Range, f: Filter, is_time: bool) -> Range | None:
    convert = _time_bounds if is_time else _int_bounds
    if isinstance(f, In):
        values = [convert(v) for v in f.value]
        if any(v is None for v in values):
            return None
        # An IN element matches only when it is exact at plateau's resolution.
        return current.only(v[0] for v in values if v is not None and v[1] == v[0] + 1)
    if not isinstance(
        f, EqualTo | EqualNullSafe | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual
    ):
        return None
    span = convert(getattr(f, "value", None))
    if span is None:
        return None
    lo, hi = span  # the values v with lo <= v < hi compare equal to the literal
    if isinstance(f, EqualTo | EqualNullSafe):
        return current.narrow(lo, hi)
    if isinstance(f, GreaterThan):
        return current.narrow(lo=hi)
    if isinstance(f, GreaterThanOrEqual):
        return current.narrow(lo=lo)
    if isinstance(f, LessThan):
        return current.narrow(hi=lo)
    return current.narrow(hi=hi)  # LessThanOrEqual


def _int_bounds(value: object) -> tuple[int, int] | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value, value + 1


def _time_bounds(value: object) -> tuple[int, int] | None:
    """[lo, hi) in epoch ms of the millisecond timestamps equal to a Spark timestamp literal:
    a literal between two milliseconds equals none (lo == hi)."""
    if not isinstance(value, datetime):
        return None
    micros = epoch_micros(value)
    lo = -(-micros // 1000)  # ceil: the first millisecond not before the literal
    hi = micros // 1000 + 1  # floor + 1: the first millisecond after it
    return lo, hi


def epoch_micros(value: datetime) -> int:
    """A Spark timestamp literal in epoch µs. Spark hands naive datetimes in the Python
    process's local zone (as `datetime.fromtimestamp` makes them), aware ones as they are."""
    if value.tzinfo is None:
        whole = int(value.replace(microsecond=0).timestamp())  # local zone, DST fold respected
        return whole * 1_000_000 + value.microsecond
    return (value - _EPOCH) // timedelta(microseconds=1)
