"""Per-column statistics of a segment (min, max, null count), promoted into the manifest so a
query can rule segments out without opening them.

Values are kept as text tagged with a kind, so one portable TEXT column holds every type and
a reader compares them after decoding, never as strings. Long strings and byte strings keep a
prefix as their minimum (still a lower bound) and no maximum (a prefix is no upper bound): a
segment of log lines does not copy its longest line into the manifest.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from plateau_core.schema import HEADERS, OFFSET, TIMESTAMP, VALUE

Kind = Literal["int", "float", "bool", "string", "binary"]
KINDS: tuple[Kind, ...] = ("int", "float", "bool", "string", "binary")
# offset and timestamp are the segment row's own spans; headers and a raw topic's value are
# payload, not something a query compares for equality.
NOT_PROMOTED = frozenset({OFFSET, TIMESTAMP, HEADERS, VALUE})
MAX_TEXT = 64  # characters (strings) or bytes (binary) kept of a minimum


@dataclass(frozen=True)
class ColumnStats:
    """One column of one segment: its null count and encoded bounds (None: unknown)."""

    column: str
    kind: Kind
    null_count: int
    min_value: str | None
    max_value: str | None


def kind_of(dtype: pa.DataType) -> Kind | None:
    """The stats kind of an Arrow type, None for types without promoted statistics."""
    t = pa.types
    if t.is_integer(dtype):
        return "int"
    if t.is_floating(dtype) and not t.is_float16(dtype):
        return "float"
    if t.is_boolean(dtype):
        return "bool"
    if t.is_string(dtype) or t.is_large_string(dtype):
        return "string"
    if t.is_binary(dtype) or t.is_large_binary(dtype):
        return "binary"
    return None


def table_columns(table: pa.Table) -> tuple[ColumnStats, ...]:
    """Statistics of every promoted column of a segment table, in schema order."""
    found = []
    for field in table.schema:
        if field.name in NOT_PROMOTED:
            continue
        kind = kind_of(field.type)
        if kind is None:
            continue
        column = table.column(field.name)
        bounds = pc.min_max(column)
        found.append(
            ColumnStats(
                column=field.name,
                kind=kind,
                null_count=column.null_count,
                min_value=encode(kind, bounds["min"].as_py(), upper=False),
                max_value=encode(kind, bounds["max"].as_py(), upper=True),
            )
        )
    return tuple(found)


def encode(kind: Kind, value: object, *, upper: bool) -> str | None:
    """A bound as text; None when it is unknown or would not be a valid bound."""
    if value is None:
        return None
    if kind == "float":
        number = float(value)  # type: ignore[arg-type]
        return None if math.isnan(number) else repr(number)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "int":
        return str(value)
    raw = value.hex() if isinstance(value, bytes) else str(value)
    limit = MAX_TEXT * 2 if kind == "binary" else MAX_TEXT
    if "\x00" in raw[:limit]:
        # PostgreSQL text holds no NUL character: what precedes it is still a lower bound.
        return None if upper else raw[: raw.index("\x00")]
    if len(raw) > limit:
        return None if upper else raw[:limit]
    return raw


def decode(kind: Kind, text: str) -> object:
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "bool":
        return text == "true"
    if kind == "binary":
        return bytes.fromhex(text)
    return text


def comparable(kind: Kind, value: object) -> object | None:
    """`value` as the kind's Python type for comparing with the bounds, or None when it is
    not comparable (then the bounds rule nothing out)."""
    if isinstance(value, bool):
        return value if kind == "bool" else None
    if kind == "int" and isinstance(value, int):
        return value
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "float" and isinstance(value, (int, float)) and not math.isnan(value):
        return float(value)
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "binary" and isinstance(value, (bytes, str)):
        return value.encode() if isinstance(value, str) else value
    return None


def may_contain(stats: ColumnStats, record_count: int, values: Iterable[object]) -> bool:
    """Whether a segment with these statistics may hold a row whose column equals one of
    `values`. False only when that is certain: every value lies outside [min, max], or the
    column is null in every row (a null equals nothing)."""
    if stats.null_count >= record_count:
        return False
    low = None if stats.min_value is None else decode(stats.kind, stats.min_value)
    high = None if stats.max_value is None else decode(stats.kind, stats.max_value)
    for value in values:
        if stats.kind == "int" and isinstance(value, float):
            # An integer column equals no fraction (nor NaN or infinity), also where it is
            # read widened to double beside segments that hold fractions. A double beyond
            # 2**53 stands for several integers: the bounds say nothing then.
            if not value.is_integer():
                continue
            if abs(value) >= 2**53:
                return True
        wanted = comparable(stats.kind, value)
        if wanted is None:
            return True
        for candidate in _as_stored(stats.kind, wanted):
            if (low is None or low <= candidate) and (high is None or candidate <= high):  # type: ignore[operator]
                return True
    return False


def _as_stored(kind: Kind, wanted: object) -> tuple[object, ...]:
    """The values a row equal to `wanted` may hold. A float column may be float32, where
    `where` compares 0.1 as float32 0.1 (0.10000000149...), a little above the double 0.1:
    the bounds of such a column are checked against both."""
    if kind != "float" or not isinstance(wanted, float):
        return (wanted,)
    try:
        single: float = struct.unpack("f", struct.pack("f", wanted))[0]
    except OverflowError:  # beyond float32: no row of such a column equals it
        return (wanted,)
    return (wanted,) if single == wanted else (wanted, single)
