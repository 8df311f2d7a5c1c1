"""Equality and IN conditions on a topic's own columns (`Store.read(..., where=...)`): the rows
they keep, and which segments the manifest's promoted statistics rule out.

A condition keeps a row when its column equals one of the values; a null equals nothing, and
a segment without the column holds no matching row. Segments are ruled out only when that is
certain, so pruning never changes a result, only how many files are opened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from plateau_core.bloom import Bloom, BloomKind, canonical, value_hash
from plateau_core.column_stats import ColumnStats, may_contain
from plateau_core.errors import InvalidInputError
from plateau_core.schema import OFFSET, TIMESTAMP

Scalar = str | bytes | int | float | bool
_SCALARS = (str, bytes, int, float, bool)
_BOUNDED = {
    OFFSET: "start_offset/end_offset",
    TIMESTAMP: "time_start/time_end",
    "partition": "partitions",
}


@dataclass(frozen=True)
class Condition:
    """`column` equals one of `values` (one value: an equality; several: an IN)."""

    column: str
    values: frozenset[Scalar]

    def mask(self, batch: pa.RecordBatch) -> pa.Array:
        index = batch.schema.get_field_index(self.column)
        # No such column, or one of Arrow's null type (a segment whose keys were all null):
        # every row is null there, and a null equals nothing.
        if index < 0 or pa.types.is_null(batch.schema.field(index).type):
            return pa.array([False] * batch.num_rows, pa.bool_())
        column = batch.column(index)
        values = sorted(self.values, key=repr)
        if _numeric(column.type) and all(_is_number(v) for v in values):
            wanted = _numbers_in(column.type, values)
            return pc.fill_null(pc.is_in(column, value_set=wanted), False)
        try:
            if pa.types.is_timestamp(column.type):
                wanted = _times_in(column.type, values)
            elif pa.types.is_decimal(column.type) and all(_is_number(v) for v in values):
                wanted = _decimals_in(column.type, values)
            else:
                wanted = pa.array(values).cast(column.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InvalidInputError(
                f"where {self.column!r}: {sorted(self.values, key=repr)!r} cannot be compared "
                f"with the column's type {column.type}: {exc}"
            ) from exc
        return pc.fill_null(pc.is_in(column, value_set=wanted), False)

    def admits(self, stats: ColumnStats | None, record_count: int) -> bool:
        """Whether a segment with these statistics (None: none recorded) may hold a match."""
        return stats is None or may_contain(stats, record_count, self.values)

    def admits_bloom(self, bloom: Bloom | None) -> bool:
        """Whether a segment with this bloom filter (None: none recorded) may hold a match."""
        if bloom is None:
            return True
        hashes = self._hashes[bloom.kind]
        return hashes is None or any(bloom.may_contain_hash(h) for h in hashes)

    @cached_property
    def _hashes(self) -> dict[BloomKind, list[int] | None]:
        """The values hashed once per filter kind, for probing every segment's filter; None
        when a value cannot be judged by filters of that kind."""
        found: dict[BloomKind, list[int] | None] = {}
        for kind in ("int", "bytes"):
            raws = [canonical(kind, v) for v in self.values]
            found[kind] = None if None in raws else [value_hash(r) for r in raws if r is not None]
        return found


Where = tuple[Condition, ...]


def build_where(where: Mapping[str, object] | None) -> Where:
    """Conditions from `{column: value}` (equality) or `{column: [values]}` (IN).

    Raises InvalidInputError naming the column for a value that is not a string, bytes or
    number, an empty list, or one of the columns the dedicated bounds filter.
    """
    if not where:
        return ()
    conditions = []
    for column, raw in sorted(where.items()):
        if column in _BOUNDED:
            raise InvalidInputError(
                f"where {column!r}: filter {column} with {_BOUNDED[column]} instead"
            )
        values: list[Scalar] = []
        for value in [raw] if isinstance(raw, _SCALARS) else _listed(column, raw):
            if not isinstance(value, _SCALARS):
                raise InvalidInputError(
                    f"where {column!r}: values must be strings, bytes or numbers, got {value!r}"
                )
            if isinstance(value, str) and not _utf8(value):
                # A lone surrogate (text decoded with surrogateescape) is in no column, and
                # hashing it for the filters failed with UnicodeEncodeError.
                raise InvalidInputError(f"where {column!r}: {value!r} is not valid Unicode text")
            values.append(value)
        conditions.append(Condition(column, frozenset(values)))
    return tuple(conditions)


def _listed(column: str, raw: object) -> list[object]:
    if not isinstance(raw, (list, tuple, set, frozenset)):
        raise InvalidInputError(
            f"where {column!r}: give a value or a list of values, got {type(raw).__name__}"
        )
    if not raw:
        raise InvalidInputError(f"where {column!r}: an empty list matches no row")
    return list(raw)


def where_mask(batch: pa.RecordBatch, where: Where) -> pa.Array | None:
    """The rows of `batch` every condition keeps (None: no conditions)."""
    combined = None
    for condition in where:
        mask = condition.mask(batch)
        combined = mask if combined is None else pc.and_(combined, mask)
    return combined


def admitted_by_blooms(where: Where, blooms: Mapping[str, Bloom]) -> bool:
    """Whether a segment with these bloom filters may hold a row every condition keeps."""
    return all(c.admits_bloom(blooms.get(c.column)) for c in where)


def admitted_by_stats(where: Where, stats: Mapping[str, ColumnStats], record_count: int) -> bool:
    """Whether a segment with these promoted statistics may hold a row every condition keeps."""
    return all(c.admits(stats.get(c.column), record_count) for c in where)


def _numbers_in(dtype: pa.DataType, values: list[Scalar]) -> pa.Array:
    """The values as `dtype`, leaving out those no row of it can equal: in an integer
    column, fractions (a column the topic widened, int32 in older segments and double in
    newer, holds no 1.5 in the older ones) and numbers beyond the type's range (2**64 is no
    int64, and must not be rounded into one through a double); in a float column, numbers
    that would become infinite as that type, and zero as both its signs."""
    if pa.types.is_integer(dtype):
        info = np.iinfo(dtype.to_pandas_dtype())
        exact = {int(v) for v in values if _integral(v)}
        return pa.array(sorted(v for v in exact if info.min <= v <= info.max), dtype)
    doubles = []
    for value in values:
        with contextlib.suppress(OverflowError):  # an int beyond any double equals no row
            doubles.append(float(value))
    if 0.0 in doubles:
        doubles += [0.0, -0.0]  # equal numbers, which is_in's hashing tells apart
    wide = pa.array(doubles, pa.float64())
    narrow = wide.cast(dtype)
    return narrow.filter(pc.or_(pc.is_finite(narrow), pc.invert(pc.is_finite(wide))))


def _times_in(dtype: pa.DataType, values: list[Scalar]) -> pa.Array:
    """The values as the timestamp type `dtype`: text in ISO 8601, a number in the type's
    unit. Text with a zone is that instant, text without one is UTC, whether the column
    has a zone or not (its naive values are UTC too): Arrow refused text with a zone for a
    naive column and text without one for a zoned column."""
    wanted = []
    for value in values:
        given = pa.array([value])
        if not isinstance(value, str):
            wanted.append(given.cast(dtype))
            continue
        try:
            wanted.append(given.cast(dtype))
        except pa.ArrowInvalid:
            other = pa.timestamp(dtype.unit, tz=None if dtype.tz else "UTC")
            # Between a zoned and a naive timestamp Arrow keeps the number: the UTC time.
            wanted.append(given.cast(other).cast(dtype))
    return pa.concat_arrays(wanted)


def _decimals_in(dtype: pa.DataType, values: list[Scalar]) -> pa.Array:
    """The numbers this segment's decimal type holds: one with more digits or places equals
    none of its values (a segment of decimal(5, 2) beside int64 ones, which the topic reads
    as a decimal that holds both), where the cast refused it and failed the read."""
    held = []
    for value in values:
        try:
            held.append(pa.array([value]).cast(dtype))
        except (pa.ArrowInvalid, OverflowError):
            continue
    return pa.concat_arrays(held) if held else pa.array([], dtype)


def _integral(value: Scalar) -> bool:
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _numeric(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_integer(dtype) or pa.types.is_floating(dtype))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
