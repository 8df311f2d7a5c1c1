"""Dead letters of produced topics: the records that did not decode, bytes unchanged, with
the plateau.error.* headers the consume path's dead letters carry, as a batch of the store's
dead-letter topic at its own offsets."""

from __future__ import annotations

import pyarrow as pa

from bridge.ingest.decode import Poison
from bridge.ingest.records import ERROR_HEADERS, HEADERS, KEY, TIMESTAMP, VALUE
from plateau_core.schema import HEADERS_TYPE


def dead_letters(
    records: pa.RecordBatch, poison: list[Poison], source: tuple[str, int], first_offset: int
) -> pa.RecordBatch:
    """The `poison` rows of `records` (an envelope batch of partition `source`) at offsets
    from `first_offset`, each with headers naming where it came from and why."""
    topic, partition = source
    rows = records.take(pa.array([p.row for p in poison], pa.int64()))
    headers = []
    for i, item in enumerate(poison):
        found = rows.column(HEADERS)[i].as_py() or []
        found += [
            {"key": ERROR_HEADERS[0], "value": topic.encode()},
            {"key": ERROR_HEADERS[1], "value": str(partition).encode()},
            {"key": ERROR_HEADERS[2], "value": str(item.offset).encode()},
            {"key": ERROR_HEADERS[3], "value": item.error.encode()},
        ]
        headers.append(found)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(range(first_offset, first_offset + len(poison)), pa.int64()),
            rows.column(TIMESTAMP),
            rows.column(KEY),
            pa.array(headers, HEADERS_TYPE),
            rows.column(VALUE),
        ],
        schema=records.schema,
    )
