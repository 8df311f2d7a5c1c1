"""The envelope: a partition's records, in offset order, as one Arrow batch."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from plateau_core.schema import HEADERS_TYPE, TIMESTAMP_TYPE

OFFSET, TIMESTAMP, KEY, HEADERS, VALUE = "offset", "timestamp", "key", "headers", "value"
ENVELOPE = pa.schema(
    [
        pa.field(OFFSET, pa.int64(), nullable=False),
        pa.field(TIMESTAMP, TIMESTAMP_TYPE, nullable=False),
        pa.field(KEY, pa.binary()),
        pa.field(HEADERS, HEADERS_TYPE),
        pa.field(VALUE, pa.binary()),
    ]
)

# The headers a dead letter carries beside the record's own (both ingest paths).
ERROR_HEADERS = (
    "plateau.error.topic",
    "plateau.error.partition",
    "plateau.error.offset",
    "plateau.error.message",
)


@dataclass(frozen=True)
class Kept:
    """What a topic keeps of each record's envelope besides offset and timestamp."""

    key: bool = True
    headers: bool = True


def envelope(
    offsets: pa.Array,
    timestamps: pa.Array,
    keys: pa.Array,
    headers: pa.Array,
    values: pa.Array,
) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([offsets, timestamps, keys, headers, values], schema=ENVELOPE)


def kept_columns(
    records: pa.RecordBatch,
    kept: Kept,
    *,
    rows: pa.Array | None = None,
    timestamps: pa.Array | None = None,
) -> dict[str, pa.Array]:
    """offset, timestamp, and key and headers if kept, of `rows` (all when None);
    `timestamps` replace the records' own (an event-time field)."""
    names = [OFFSET, *((KEY,) if kept.key else ()), *((HEADERS,) if kept.headers else ())]
    taken = records if rows is None else records.take(rows)
    columns = {name: taken.column(name) for name in names}
    columns[TIMESTAMP] = taken.column(TIMESTAMP) if timestamps is None else timestamps
    return {name: columns[name] for name in (OFFSET, TIMESTAMP, *names[1:])}


def header_pairs(records: pa.RecordBatch, row: int) -> list[tuple[str, bytes | None]]:
    """The headers of one record as (key, value) pairs, for a dead letter."""
    found = records.column(HEADERS)[row].as_py()
    return [] if found is None else [(h["key"], h["value"]) for h in found]
