"""A record's time from one of its fields (`timestamp: field:<name>`): timestamps, numbers as
epoch milliseconds, or ISO 8601 text; what is none of these is the record's error."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from plateau_core.schema import TIMESTAMP_TYPE


def event_times(table: pa.Table, name: str) -> tuple[pa.Array, dict[int, str]]:
    """The timestamp column from a field: timestamps, or numbers as epoch milliseconds."""
    if name not in table.column_names:
        return pa.nulls(table.num_rows, TIMESTAMP_TYPE), dict.fromkeys(
            range(table.num_rows), f"timestamp field {name!r} is missing"
        )
    column = table.column(name).combine_chunks()
    bad: dict[int, str] = {}
    if pa.types.is_timestamp(column.type):
        stamps = column.cast(TIMESTAMP_TYPE)
    elif pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        stamps, bad = epoch_ms(column, name)
    elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        stamps, bad = _iso_times(column, name)
    else:
        return pa.nulls(table.num_rows, TIMESTAMP_TYPE), dict.fromkeys(
            range(table.num_rows),
            f"timestamp field {name!r} is {column.type}, not a timestamp or epoch milliseconds",
        )
    nulls = stamps.is_null()
    for i, v in enumerate(nulls):
        if v.as_py() and i not in bad:
            bad[i] = f"timestamp field {name!r} is null or missing"
    return stamps, bad


# Epoch milliseconds of 0001-01-01 and 9999-12-31: beyond them a number is not a time in
# milliseconds (seconds or microseconds by mistake, NaN, infinity) and would be stored as
# a date no reader can show.
_EARLIEST_MS, _LATEST_MS = -62_135_596_800_000, 253_402_300_799_999


def epoch_ms(column: pa.Array, name: str) -> tuple[pa.Array, dict[int, str]]:
    finite = pc.is_finite(column) if pa.types.is_floating(column.type) else None
    values = column.to_pylist()
    bad = {
        i: f"timestamp field {name!r} is {v!r}, not epoch milliseconds between years 1 and 9999"
        for i, v in enumerate(values)
        if v is not None
        and ((finite is not None and not finite[i].as_py()) or not _EARLIEST_MS <= v <= _LATEST_MS)
    }
    if bad:
        column = pa.array([None if i in bad else v for i, v in enumerate(values)], column.type)
    return column.cast(pa.int64(), safe=False).cast(TIMESTAMP_TYPE), bad


def _iso_times(column: pa.Array, name: str) -> tuple[pa.Array, dict[int, str]]:
    """ISO 8601 text (with fractional seconds, `Z` or an offset) as timestamps; text
    without a zone or that is not a time is the record's error."""
    try:
        return column.cast(TIMESTAMP_TYPE), {}
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    stamps: list[int | None] = []
    bad: dict[int, str] = {}
    for i, text in enumerate(column.to_pylist()):
        if text is None:
            stamps.append(None)
            continue
        try:
            stamps.append(pa.array([text]).cast(TIMESTAMP_TYPE).cast(pa.int64())[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            stamps.append(None)
            bad[i] = f"timestamp field {name!r} is {text[:40]!r}: not ISO 8601 with a zone"
    return pa.array(stamps, pa.int64()).cast(TIMESTAMP_TYPE), bad
