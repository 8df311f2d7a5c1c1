"""A distinct count over a field whose types clash across segments (a number in one, a
string in another) counts what the raw read shows: the read presents such a column as JSON
text, where 42 and "42" are one value, so the sketches count them once."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.rollup import RollupPolicy, reaggregate, rollup_metrics
from plateau_core.sketches import estimate, sketch
from tests.support import append_patiently

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000
POLICY = RollupPolicy("1m", 60_000, (), rollup_metrics(["count", "distinct:user"]))


def _seal_each(store: Store, parts: list[pa.Array]) -> None:
    """Each of `parts` as the `user` column of its own raw segment, in one bucket."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_age_s=3600), rollups=(POLICY,))
        offset = 0
        for users in parts:
            offsets = list(range(offset, offset + len(users)))
            offset += len(users)
            batch = pa.RecordBatch.from_pydict(
                {
                    "offset": pa.array(offsets, pa.int64()),
                    "timestamp": pa.array([BASE_MS + o for o in offsets], TS),
                    "user": users,
                }
            )
            append_patiently(writer, "logs", 0, batch)
            writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)


def _distinct_read(store: Store) -> set[Any]:
    return set(store.read("logs").to_table().column("user").to_pylist()) - {None}


def test_a_number_and_its_text_across_clashing_segments_count_once(store: Store) -> None:
    _seal_each(
        store,
        [
            pa.array([42, 7, -3, None], pa.int64()),
            pa.array(["42", "007", "x", "0.5"], pa.string()),
            pa.array([0.5, 2.25], pa.float64()),
        ],
    )
    assert len(store.manifest.segments("logs")) == 3
    # What the raw read shows: one text column; 42 and "42" read the same, "007" is not 7.
    shown = _distinct_read(store)
    assert shown == {"42", "7", "-3", "007", "x", "0.5", "2.25"}
    table = reaggregate(store.read("logs.rollup.1m").to_table(), POLICY)
    assert table.column("count").to_pylist() == [10]
    assert table.column("distinct_user").to_pylist() == [float(len(shown))]


def test_a_string_column_alone_counts_as_before() -> None:
    """Texts that read like numbers hash as those numbers, one to one: a column of strings
    alone counts exactly its distinct strings."""
    texts = ["42", "042", "+42", "42.0", "0.5", "0.50", "x", "-3", "1e3", "NaN", "9" * 30]
    assert estimate(sketch("bytes", texts)) == float(len(texts))
