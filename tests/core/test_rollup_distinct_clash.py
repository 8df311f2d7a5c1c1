"""A distinct count over a field whose types clash across segments (a number in one, a
string in another) counts what the raw read shows: the read presents such a column as JSON
text, where 42 and "42" are one value, so the sketches count them once."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.rollup import RollupPolicy, reaggregate, rollup_metrics
from plateau_core.sketches import SketchKind, estimate, sketch
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


UINT64_MAX = 2**64 - 1


def test_a_uint64_past_int64_beside_its_text_counts_once(store: Store) -> None:
    """A uint64 past int64 reads as its digits in the text column: the string of those
    digits is the same value."""
    _seal_each(
        store,
        [
            pa.array([UINT64_MAX, 7], pa.uint64()),
            pa.array([str(UINT64_MAX), "x"], pa.string()),
        ],
    )
    shown = _distinct_read(store)
    assert shown == {str(UINT64_MAX), "7", "x"}
    table = reaggregate(store.read("logs.rollup.1m").to_table(), POLICY)
    assert table.column("distinct_user").to_pylist() == [float(len(shown))]


def test_a_number_s_one_text_hashes_as_it_and_every_string_stays_itself() -> None:
    """A string hashes as the number it is the one text of (an integer's digits, a
    fraction's shortest double text, or its plain digits when no double holds it); other
    texts of a number ("42.0", "42.00", "1.10") are strings, so a column of strings alone
    counts exactly its distinct strings."""
    numbers = [
        ("42", 42),
        ("-3", -3),
        ("-1.25", Decimal("-1.25")),
        ("-1.25", -1.25),
        ("0.5", 0.5),
        ("1e-07", 1e-07),
        (str(UINT64_MAX), UINT64_MAX),
        ("9" * 40, Decimal("9" * 40)),
        ("0.1000000000000000000000000000000001", Decimal("0.1000000000000000000000000000000001")),
    ]
    for text, number in numbers:
        assert sketch("bytes", [text]) == sketch(_kind(number), [number]), text
    others = [("42.0", 42.0), ("42.00", Decimal("42.00")), ("1.10", Decimal("1.10"))]
    for text, number in others:
        assert sketch("bytes", [text]) != sketch(_kind(number), [number]), text
    texts = ["42", "042", "+42", "42.0", "42.00", "1.1", "1.10", "0.5", "0.50", "0.0000001"]
    texts += ["1e-07", "x", "-3", "-0", "1e3", "1e+20", "NaN", "9" * 30, str(UINT64_MAX)]
    assert estimate(sketch("bytes", texts)) == float(len(texts))


def _kind(number: object) -> SketchKind:
    if isinstance(number, Decimal):
        return "decimal"
    return "float" if isinstance(number, float) else "int"
