"""A distinct count over a field whose types clash across segments (a number in one, a
string in another) counts what the raw read shows: the read presents such a column as JSON
text, where 42 and "42" are one value, so the sketches count them once."""

from __future__ import annotations

import math
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


def test_a_uint64_and_a_decimal_beside_their_texts_count_once(store: Store) -> None:
    """A uint64 past int64 reads as its digits and a decimal(10, 2) as its digits with
    both places in the text column: the strings of those texts are the same values."""
    _seal_each(
        store,
        [
            pa.array([UINT64_MAX, 7], pa.uint64()),
            pa.array([str(UINT64_MAX), "42.00", "x"], pa.string()),
            pa.array([Decimal("42.00"), Decimal("1.50")], pa.decimal128(10, 2)),
        ],
    )
    shown = _distinct_read(store)
    assert shown == {str(UINT64_MAX), "7", "42.00", "x", "1.50"}
    table = reaggregate(store.read("logs.rollup.1m").to_table(), POLICY)
    assert table.column("distinct_user").to_pylist() == [float(len(shown))]


def test_the_texts_of_one_number_count_once_and_other_strings_as_text() -> None:
    """A string hashes as the number whose text a read writes (an integer's digits, a
    decimal's with its places, a double's repr), so "42", "42.0" and "42.00" count once, as
    42, 42.0 and 42.00 do; a text no read writes for a number ("042", "4.2e1") is text."""
    numbers = [
        ("42", 42),
        ("42.0", 42.0),
        ("42.00", Decimal("42.00")),
        ("-1.25", Decimal("-1.25")),
        ("0.50", 0.5),
        (str(UINT64_MAX), UINT64_MAX),
        ("1e+20", 1e20),
        ("-0.0", 0),
        ("NaN", math.nan),
        ("-Infinity", -math.inf),
        ("0.1000000000000000000000000000000001", Decimal("0.1000000000000000000000000000000001")),
    ]
    for text, number in numbers:
        kind = _kind(number)
        assert sketch("bytes", [text]) == sketch(kind, [number]), text
    texts = ["42", "42.0", "42.00", "042", "+42", "4.2e1", "42.", "-0", "-0.00", "nan", "x"]
    assert estimate(sketch("bytes", texts)) == float(len(texts) - 2)


def _kind(number: object) -> SketchKind:
    if isinstance(number, Decimal):
        return "decimal"
    return "float" if isinstance(number, float) else "int"
