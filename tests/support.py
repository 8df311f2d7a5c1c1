"""Small builders shared by the tests."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pyarrow as pa

from plateau_core import BackpressureError, Writer

BASE_MS = 1_700_000_000_000


def batch(
    offsets: Sequence[int],
    *,
    times: Sequence[int] | None = None,
    value_size: int = 16,
    extra: dict[str, pa.Array] | None = None,
) -> pa.RecordBatch:
    """A segment-shaped batch: offset, timestamp (BASE_MS + offset by default), key, value."""
    stamps = [BASE_MS + o for o in offsets] if times is None else list(times)
    columns: dict[str, pa.Array] = {
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array(stamps, pa.timestamp("ms", tz="UTC")),
        "key": pa.array([f"k{o % 7}".encode() for o in offsets], pa.binary()),
        "value": pa.array([(f"v{o}-".encode() * value_size)[:value_size] for o in offsets]),
    }
    columns.update(extra or {})
    return pa.RecordBatch.from_pydict(columns)


def append_patiently(
    writer: Writer, topic: str, partition: int, data: pa.RecordBatch, timeout_s: float = 30.0
) -> int:
    """Append, waiting out backpressure the way the bridge does; returns refusals seen."""
    refusals = 0
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            writer.append(topic, partition, data)
            return refusals
        except BackpressureError:
            refusals += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)
