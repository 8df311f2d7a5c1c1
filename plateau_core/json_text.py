"""Values as JSON text: how a column whose stored types clash (an int in some segments, a
string in others) is read, as one string column.

The Spark connector (org.plateau.spark.JsonText) writes the same text, character for
character: strings stay as they are (inside a list or struct, quoted and escaped as Python's
json.dumps escapes them), integers and decimals in plain digits, doubles as Python's repr
(NaN, Infinity and -Infinity as json.dumps writes them), booleans as true/false, binary in
base64, dates and timestamps in ISO 8601 (UTC, `Z` when the type has a zone), lists as arrays
and structs and maps as objects, without spaces. Nulls stay null.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
from collections.abc import Iterable

import pyarrow as pa

_FRACTION_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def is_text(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_string(dtype) or pa.types.is_large_string(dtype))


def as_json_text(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """`column` as a string column of its values' JSON text (strings as they are)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if is_text(column.type):
        return column.cast(pa.string())
    return pa.array(_texts(column, nested=False), pa.string())


def texted(batch: pa.RecordBatch, names: Iterable[str]) -> pa.RecordBatch:
    """`batch` with the columns `names` (those it has) as JSON text."""
    wanted = {f.name for f in batch.schema if f.name in set(names) and not is_text(f.type)}
    if not wanted:
        return batch
    arrays = [
        as_json_text(c) if f.name in wanted else c
        for f, c in zip(batch.schema, batch.columns, strict=True)
    ]
    fields = [f.with_type(pa.string()) if f.name in wanted else f for f in batch.schema]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def value_texts(value: str | bytes | int | float | bool) -> frozenset[str]:
    """The texts a row equal to `value` reads as in a clashed column: the value's own JSON
    text and, for a number, that of the equal number of the other kind (1.0 stored as a
    double reads "1.0", stored as an int "1"); for bytes also the text they are."""
    if isinstance(value, str):
        return frozenset([value])
    if isinstance(value, bool):
        return frozenset(["true" if value else "false"])
    if isinstance(value, bytes):
        texts = {base64.b64encode(value).decode()}
        with contextlib.suppress(UnicodeDecodeError):
            texts.add(value.decode())
        return frozenset(texts)
    if isinstance(value, int):
        texts = {str(value)}
        with contextlib.suppress(OverflowError):  # beyond any double: no double equals it
            if int(float(value)) == value:
                texts.add(as_double_text(float(value)))
        return frozenset(texts)
    texts = {as_double_text(value)}
    if math.isfinite(value) and value.is_integer():
        texts.add(str(int(value)))
    return frozenset(texts)


def _texts(column: pa.Array, *, nested: bool) -> list[str | None]:
    """Each value's text; `nested`: as it is written inside an array or object (strings,
    binary, dates and timestamps quoted)."""
    t, types = column.type, pa.types
    if types.is_null(t):
        return [None] * len(column)
    if types.is_list(t) or types.is_large_list(t):
        return _lists(column)
    if types.is_struct(t):
        return _structs(column)
    if types.is_map(t):
        return _maps(column)
    if types.is_integer(t):
        return column.cast(pa.string()).to_pylist()  # type: ignore[no-any-return]
    values = column.to_pylist()
    if types.is_boolean(t):
        return [None if v is None else ("true" if v else "false") for v in values]
    if types.is_floating(t):
        return [None if v is None else as_double_text(v) for v in values]
    if types.is_decimal(t):
        return [None if v is None else format(v, "f") for v in values]
    texts = _quotable(column, values)
    if not nested:
        return texts
    return [None if v is None else json.dumps(v, ensure_ascii=False) for v in texts]


def _quotable(column: pa.Array, values: list[object]) -> list[str | None]:
    """The text of values a JSON array or object holds as strings."""
    t, types = column.type, pa.types
    if types.is_timestamp(t):
        digits, zone = _FRACTION_DIGITS[t.unit], "Z" if t.tz is not None else ""
        numbers = column.cast(pa.int64()).to_pylist()
        return [None if v is None else _timestamp(v, digits) + zone for v in numbers]
    if types.is_date32(t):
        return [None if v is None else _date(v) for v in column.cast(pa.int32()).to_pylist()]
    if types.is_binary(t) or types.is_large_binary(t):
        return [None if v is None else base64.b64encode(v).decode() for v in values]  # type: ignore[arg-type]
    if is_text(t):
        return values  # type: ignore[return-value]
    raise TypeError(f"no JSON text for Arrow type {t}")


def _lists(column: pa.Array) -> list[str | None]:
    items = _texts(column.values, nested=True)
    offsets = column.offsets.to_pylist()
    valid = column.is_valid().to_pylist()
    return [
        "[" + ",".join(_item(v) for v in items[offsets[i] : offsets[i + 1]]) + "]"
        if valid[i]
        else None
        for i in range(len(column))
    ]


def _structs(column: pa.Array) -> list[str | None]:
    t = column.type
    names = [json.dumps(t.field(i).name, ensure_ascii=False) + ":" for i in range(t.num_fields)]
    children = [_texts(child, nested=True) for child in column.flatten()]
    valid = column.is_valid().to_pylist()
    return [
        "{" + ",".join(n + _item(c[i]) for n, c in zip(names, children, strict=True)) + "}"
        if valid[i]
        else None
        for i in range(len(column))
    ]


def _maps(column: pa.Array) -> list[str | None]:
    keys = [json.dumps(k, ensure_ascii=False) for k in _texts(column.keys, nested=False)]
    items = _texts(column.items, nested=True)
    offsets = column.offsets.to_pylist()
    valid = column.is_valid().to_pylist()
    return [
        "{"
        + ",".join(f"{keys[j]}:{_item(items[j])}" for j in range(offsets[i], offsets[i + 1]))
        + "}"
        if valid[i]
        else None
        for i in range(len(column))
    ]


def _item(text: str | None) -> str:
    return "null" if text is None else text


def as_double_text(value: float) -> str:
    """A double's text: its repr, NaN and the infinities as json.dumps writes them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _date(days: int) -> str:
    year, month, day = _civil(days)
    return f"{year:04d}-{month:02d}-{day:02d}"


def _timestamp(value: int, digits: int) -> str:
    seconds, fraction = divmod(value, 10**digits)
    days, second = divmod(seconds, 86_400)
    text = f"{_date(days)}T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
    return f"{text}.{fraction:0{digits}d}" if digits else text


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day number since 1970-01-01, proleptic Gregorian, any year
    (Howard Hinnant's civil_from_days)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day
