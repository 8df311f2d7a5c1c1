"""What a read asks for: the topic, partitions, offset and time ranges, columns, `where`
conditions, order and limit, checked once, and the row mask they make of a batch."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from plateau_core.conform import conform_column
from plateau_core.errors import InvalidInputError
from plateau_core.json_text import texted, value_texts
from plateau_core.manifest import SegmentRecord
from plateau_core.schema import INT64_MAX, INT64_MIN, OFFSET, TIMESTAMP
from plateau_core.segment_file import BatchSpan
from plateau_core.where import Condition, Where, where_mask

Order = Literal["asc", "desc"]
OrderBy = Literal["offset", "timestamp"]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_epoch_ms(value: datetime | int | None, name: str) -> int | None:
    """A time bound as epoch milliseconds, rounded up (a naive datetime is UTC).

    Raises:
        InvalidInputError: `value` is neither a datetime nor an integer within 64 bits;
            the message names it `name`.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        # Rounded up: timestamps are whole milliseconds, so `t >= 1.5 ms` is `t >= 2` and
        # `t < 1.5 ms` is `t < 2`; both bounds (inclusive start, exclusive end) round up.
        # Integer arithmetic: float seconds * 1000 can land a hair below the millisecond.
        return -((_EPOCH - aware) // timedelta(milliseconds=1))
    number = _integer(value)
    if number is not None:
        return _in_int64(number, name)
    raise InvalidInputError(f"{name} must be a datetime or epoch milliseconds, got {value!r}")


def _offset(value: object, name: str) -> int | None:
    if value is None:
        return None
    number = _integer(value)
    if number is None:
        # A float would pass the manifest's comparisons and then be truncated by the row
        # filter: start_offset=0.5 returned offset 0.
        raise InvalidInputError(f"{name} must be an integer offset, got {value!r}")
    return _in_int64(number, name)


def _integer(value: object) -> int | None:
    """An int, or an integer of numpy's; None for anything else (a bool, a float, text)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def _in_int64(value: int, name: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidInputError(f"{name} must fit in 64 bits, got {value}")
    return value


def _partitions(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        found = [_integer(v) for v in value]
        if all(p is not None for p in found):
            return tuple(p for p in found if p is not None)
    raise InvalidInputError(f"partitions must be a list of partition numbers, got {value!r}")


def _columns(value: object) -> tuple[str, ...] | None:
    """A bare string (columns="service") is refused, not taken apart into letters."""
    if value is None:
        return None
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        found = list(value)
        if all(isinstance(c, str) for c in found):
            return tuple(found)
    raise InvalidInputError(f"columns must be a list of column names, got {value!r}")


@dataclass(frozen=True)
class ReadRequest:
    """One read, checked: offset bounds [start_offset, end_offset) and time bounds
    [time_start, time_end) in epoch ms, None where unbounded. Made by `build` from what a
    caller passed, or `whole` for every row."""

    topic: str
    partitions: tuple[int, ...] | None
    start_offset: int | None
    end_offset: int | None
    time_start: int | None  # epoch ms, inclusive
    time_end: int | None  # epoch ms, exclusive
    columns: tuple[str, ...] | None
    limit: int | None
    order: Order
    # Exact value sets (a SQL IN); the bounds above are then narrowed to their min/max.
    offsets_in: frozenset[int] | None = None
    times_in: frozenset[int] | None = None  # epoch ms
    # Equality / IN conditions on the topic's own columns (plateau_core.where).
    where: Where = ()
    # "timestamp": rows strictly in timestamp order across segments and partitions
    # (plateau_core.top_by_time); "offset": each segment's rows in offset order.
    order_by: OrderBy = "offset"
    # Columns whose stored types clash (plateau_core.schema_merge.MergedSchema): read as JSON text,
    # so `where` compares that text in every segment, whatever type it holds them as.
    as_text: frozenset[str] = frozenset()
    # `where` columns the topic reads as timestamps, with that type: a segment may store one
    # in another unit or zone, and `where` compares the values the read returns.
    times_as: tuple[tuple[str, pa.DataType], ...] = ()

    @classmethod
    def build(
        cls,
        topic: str,
        *,
        partitions: list[int] | None,
        start_offset: int | None,
        end_offset: int | None,
        time_start: datetime | int | None,
        time_end: datetime | int | None,
        columns: list[str] | None,
        limit: int | None,
        order: Order,
        where: Where = (),
        order_by: OrderBy = "offset",
    ) -> ReadRequest:
        """The request `Store.read` was given, checked and in the engine's units.

        Raises:
            InvalidInputError: An argument is malformed: order or order_by not one of
                theirs, a negative or non-integer limit, a float or out-of-range offset, a
                time that is no datetime or epoch ms, partitions or columns not a list.
        """
        if order not in ("asc", "desc"):
            raise InvalidInputError(f"order must be 'asc' or 'desc', got {order!r}")
        if order_by not in ("offset", "timestamp"):
            raise InvalidInputError(f"order_by must be 'offset' or 'timestamp', got {order_by!r}")
        if limit is not None and ((counted := _integer(limit)) is None or counted < 0):
            raise InvalidInputError(f"limit must be a non-negative integer, got {limit!r}")
        return cls(
            topic=topic,
            partitions=_partitions(partitions),
            start_offset=_offset(start_offset, "start_offset"),
            end_offset=_offset(end_offset, "end_offset"),
            time_start=to_epoch_ms(time_start, "time_start"),
            time_end=to_epoch_ms(time_end, "time_end"),
            columns=_columns(columns),
            limit=limit,
            order=order,
            where=where,
            order_by=order_by,
        )

    @classmethod
    def whole(cls, topic: str, columns: tuple[str, ...] | None = None) -> ReadRequest:
        """Every row of `topic`, in offset order."""
        return cls(
            topic=topic,
            partitions=None,
            start_offset=None,
            end_offset=None,
            time_start=None,
            time_end=None,
            columns=columns,
            limit=None,
            order="asc",
        )

    def covers(self, segment: SegmentRecord) -> bool:
        """True when every row of the segment passes the filters (no row mask needed)."""
        return (
            self.offsets_in is None
            and self.times_in is None
            and not self.where
            and (self.start_offset is None or segment.start_offset >= self.start_offset)
            and (self.end_offset is None or segment.end_offset <= self.end_offset)
            and (self.time_start is None or segment.time_min >= self.time_start)
            and (self.time_end is None or segment.time_max < self.time_end)
        )

    def overlaps(self, span: BatchSpan) -> bool:
        """Whether a batch with this [first, last] offset and [min, max] time can match."""
        first, last, time_min, time_max = span
        return (
            (self.start_offset is None or last >= self.start_offset)
            and (self.end_offset is None or first < self.end_offset)
            and (self.time_start is None or time_max >= self.time_start)
            and (self.time_end is None or time_min < self.time_end)
        )

    def mask(self, batch: pa.RecordBatch) -> pa.Array | None:
        """The rows of `batch` the request keeps (None: no filter applies).

        Raises:
            InvalidInputError: A `where` value cannot be compared with its column's type.
        """
        conditions = []
        offsets = batch.column(OFFSET)
        # Typed scalars: a plain int would be converted again for every batch.
        if self.start_offset is not None:
            conditions.append(pc.greater_equal(offsets, _int64(self.start_offset)))
        if self.offsets_in is not None:
            conditions.append(pc.is_in(offsets, pa.array(sorted(self.offsets_in), pa.int64())))
        if self.end_offset is not None:
            conditions.append(pc.less(offsets, _int64(self.end_offset)))
        if self.time_start is not None or self.time_end is not None or self.times_in is not None:
            times = batch.column(TIMESTAMP).cast(pa.int64())
            if self.times_in is not None:
                conditions.append(pc.is_in(times, pa.array(sorted(self.times_in), pa.int64())))
            if self.time_start is not None:
                conditions.append(pc.greater_equal(times, _int64(self.time_start)))
            if self.time_end is not None:
                conditions.append(pc.less(times, _int64(self.time_end)))
        if self.where:
            seen = _retimed(batch, self.times_as)
            if self.as_text:
                conditions.append(where_mask(texted(seen, self.as_text), self._text_where()))
            else:
                conditions.append(where_mask(seen, self.where))
        if not conditions:
            return None
        combined = conditions[0]
        for condition in conditions[1:]:
            combined = pc.and_(combined, condition)
        return combined

    def _text_where(self) -> Where:
        """`where` with the values of clashed columns as the texts their rows read as: the
        number 1.0 finds a double's "1.0" and an int's "1", bytes their base64."""
        return tuple(
            Condition(c.column, frozenset().union(*map(value_texts, c.values)))
            if c.column in self.as_text
            else c
            for c in self.where
        )


def at_or_beyond(request: ReadRequest, threshold: int) -> ReadRequest:
    """`request` narrowed to the rows a timestamp-ordered read can still use: at or after
    `threshold` (descending) or at or before it (ascending)."""
    if request.order == "desc":
        start = threshold if request.time_start is None else max(request.time_start, threshold)
        return replace(request, time_start=start)
    end = threshold + 1 if request.time_end is None else min(request.time_end, threshold + 1)
    return replace(request, time_end=end)


def _retimed(batch: pa.RecordBatch, types: tuple[tuple[str, pa.DataType], ...]) -> pa.RecordBatch:
    """`batch` with the columns `types` names as their types (the timestamps it holds in
    another unit or zone, as the read returns them)."""
    for name, dtype in types:
        index = batch.schema.get_field_index(name)
        if index >= 0 and batch.schema.field(index).type != dtype:
            column = conform_column(batch.column(index), dtype, name=name)
            batch = batch.set_column(index, batch.schema.field(index).with_type(dtype), column)
    return batch


def _int64(value: int) -> pa.Scalar:
    return pa.scalar(value, pa.int64())
