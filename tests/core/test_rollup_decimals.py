"""Roll-ups over decimal columns (a json field widened to decimal(38, 0), an arrow or
schema-registry decimal, a merge such as int64 beside decimal(5, 2)): a distinct count
hashes a decimal as the integer or double that is the same number, and sums, minimums and
maximums hold, at seal and re-aggregated, with a sum past 38 digits held as a double and
logged instead of wrapping round."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
from structlog.testing import capture_logs

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.rollup import RollupPolicy, reaggregate, rollup_metrics, rollup_table
from plateau_core.sketches import SketchKind, estimate, merge_sketches, sketch, sketch_kind
from tests.support import append_patiently

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000
WHOLE = pa.decimal128(38, 0)
UINT64_MAX = 2**64 - 1
HUGE = 9 * 10**37  # two of them pass decimal(38, 0)
POLICY = RollupPolicy(
    "1m",
    60_000,
    (),
    rollup_metrics(["count", "distinct:id", "sum:id", "min:id", "max:id"]),
)


def _seal_each(store: Store, parts: list[pa.Array]) -> None:
    """Each of `parts` as the `id` column of its own raw segment, in one bucket."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("ids", 0, roll=RollPolicy(max_age_s=3600), rollups=(POLICY,))
        offset = 0
        for ids in parts:
            offsets = list(range(offset, offset + len(ids)))
            offset += len(ids)
            batch = pa.RecordBatch.from_pydict(
                {
                    "offset": pa.array(offsets, pa.int64()),
                    "timestamp": pa.array([BASE_MS + o for o in offsets], TS),
                    "id": ids,
                }
            )
            append_patiently(writer, "ids", 0, batch)
            writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)
    assert len(store.manifest.segments("ids")) == len(parts)


def _by_hand(values: list[Any]) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    return {
        "count": len(values),
        "distinct_id": float(len(set(present))),
        "sum_id": sum(present),
        "min_id": min(present),
        "max_id": max(present),
    }


def _answer(store: Store) -> dict[str, Any]:
    table = reaggregate(store.read("ids.rollup.1m").to_table(), POLICY)
    (row,) = table.select(["count", "distinct_id", "sum_id", "min_id", "max_id"]).to_pylist()
    return dict(row)


def test_decimals_hash_as_the_integers_and_doubles_they_equal() -> None:
    assert sketch_kind(WHOLE) == sketch_kind(pa.decimal128(5, 2)) == "decimal"
    assert sketch_kind(pa.decimal256(50, 3)) == "decimal"
    same: list[tuple[list[Decimal], SketchKind, list[Any]]] = [
        ([Decimal(42), Decimal("42.00"), Decimal(-7)], "int", [42, -7]),
        ([Decimal(UINT64_MAX), Decimal(2**63)], "int", [UINT64_MAX, 2**63]),
        ([Decimal("0.10"), Decimal("2.5"), Decimal("-0.001")], "float", [0.1, 2.5, -0.001]),
        ([Decimal(3), Decimal("3.000")], "float", [3.0]),
    ]
    for decimals, kind, numbers in same:
        assert sketch("decimal", decimals) == sketch(kind, numbers)
    # More digits than a double holds: two decimals one double rounds to stay two, the
    # longer one not hashed as that double; as a clashed column reads it, it is its text.
    close = [Decimal("0.1000000000000000000000000000000001"), Decimal("0.1")]
    assert estimate(sketch("decimal", close)) == 2.0
    merged = merge_sketches(
        [sketch("decimal", close), sketch("float", [0.1]), sketch("bytes", [str(close[0])])]
    )
    assert estimate(merged) == 2.0
    assert sketch("bytes", [str(close[0])]) == sketch("decimal", close[:1])
    # 38 digits and places, and a decimal256 past int128, each counted as themselves.
    wide = [
        Decimal("1234567890123456789012345678.1234567891"),
        Decimal("1234567890123456789012345678.1234567890"),
        Decimal("1234567890123456789012345678.123456789"),
        Decimal(10**60),
        Decimal(10**60 + 1),
    ]
    assert estimate(sketch("decimal", wide)) == 4.0


def test_a_field_widened_from_int64_to_decimal_counts_each_value_once(store: Store) -> None:
    """Segments of int64, then of decimal(38, 0) once a uint64 id came: 42 and 7 are in
    both, and count once, as the read shows them."""
    parts = [
        pa.array([42, 7, None, 2**63 - 1], pa.int64()),
        pa.array([Decimal(42), Decimal(UINT64_MAX), Decimal(7), Decimal(2**63 - 1)], WHOLE),
        pa.array([Decimal(UINT64_MAX), Decimal(3)], WHOLE),
    ]
    _seal_each(store, parts)
    read = store.read("ids").to_table()
    assert read.schema.field("id").type == WHOLE
    shown = read.column("id").to_pylist()
    assert len(set(shown) - {None}) == 5
    assert _answer(store) == _by_hand(shown)


def test_a_merged_decimal_column_beside_doubles_counts_what_the_read_shows(
    store: Store,
) -> None:
    """int64 beside decimal(5, 2) reads as decimal(21, 2), and beside doubles as double: a
    whole decimal counts once with that integer and that double, one with a fraction once
    with the double it reads as."""
    parts = [
        pa.array([42, 3], pa.int64()),
        pa.array([Decimal("42.00"), Decimal("0.10"), Decimal("1.50")], pa.decimal128(5, 2)),
        pa.array([0.1, 42.0, 2.25], pa.float64()),
    ]
    _seal_each(store, parts)
    shown = store.read("ids").to_table().column("id").to_pylist()
    assert set(shown) == {42.0, 3.0, 0.1, 1.5, 2.25}
    answer = _answer(store)
    assert answer["distinct_id"] == 5.0
    assert answer["sum_id"] == sum(shown)
    assert (answer["min_id"], answer["max_id"]) == (0.1, 42.0)


def test_sums_minimums_and_maximums_of_decimals_at_seal_and_re_aggregated(
    store: Store,
) -> None:
    """A column of decimals with places beside int64 (read as decimal(21, 2)), and one
    widened from int64 to decimal(38, 0): each segment's sums as Arrow types them, the
    answer as the raw read computes it."""
    parts = [
        pa.array([Decimal("1.25"), Decimal("-2.50"), None], pa.decimal128(7, 2)),
        pa.array([5, -9], pa.int64()),
    ]
    _seal_each(store, parts)
    rolled = store.read("ids.rollup.1m").to_table()
    assert rolled.column("sum_id").to_pylist() == [Decimal("-1.25"), Decimal(-4)]
    assert rolled.column("min_id").to_pylist() == [Decimal("-2.50"), Decimal(-9)]
    shown = store.read("ids").to_table().column("id").to_pylist()
    assert _answer(store) == _by_hand(shown)


def test_int64_segments_then_decimal_ones_read_together(store: Store) -> None:
    parts = [
        pa.array([5, -9], pa.int64()),
        pa.array([Decimal(UINT64_MAX), Decimal(1)], WHOLE),
        pa.array([Decimal(-(2**70)), None], WHOLE),
    ]
    _seal_each(store, parts)
    rolled = store.read("ids.rollup.1m").to_table()
    assert rolled.schema.field("sum_id").type == WHOLE
    assert rolled.column("sum_id").to_pylist() == [
        Decimal(-4),
        Decimal(UINT64_MAX + 1),
        Decimal(-(2**70)),
    ]
    shown = store.read("ids").to_table().column("id").to_pylist()
    assert _answer(store) == _by_hand(shown)


def test_a_decimal_sum_past_38_digits_is_a_logged_double_at_seal() -> None:
    def segment(values: list[int]) -> pa.Table:
        return pa.table(
            {
                "offset": pa.array(range(len(values)), pa.int64()),
                "timestamp": pa.array([BASE_MS] * len(values), TS),
                "id": pa.array([Decimal(v) for v in values], WHOLE),
            }
        )

    with capture_logs() as logs:
        rolled = rollup_table(segment([HUGE, HUGE, 1]), POLICY, topic="ids", partition=0)
    assert rolled.schema.field("sum_id").type == pa.float64()
    assert rolled.column("sum_id").to_pylist() == [float(2 * HUGE + 1)]
    assert rolled.column("max_id").to_pylist() == [Decimal(HUGE)]
    widened = [e for e in logs if e["event"] == "rollup_sum_widened"]
    assert [(e["topic"], e["partition"], e["start_offset"], e["end_offset"]) for e in widened] == [
        ("ids", 0, 0, 2)
    ]
    assert [(e["metrics"], e["type"]) for e in widened] == [(["sum_id"], "double")]
    # Magnitudes that add up past 38 digits, a sum that does not: exact, as Arrow types it.
    with capture_logs() as logs:
        rolled = rollup_table(segment([HUGE, -HUGE, 5, HUGE]), POLICY)
    assert rolled.schema.field("sum_id").type == WHOLE
    assert rolled.column("sum_id").to_pylist() == [Decimal(HUGE + 5)]
    assert not [e for e in logs if e["event"] == "rollup_sum_widened"]


def test_decimal_sums_that_add_up_past_38_digits_re_aggregate_as_a_logged_double(
    store: Store,
) -> None:
    _seal_each(store, [pa.array([Decimal(HUGE)], WHOLE), pa.array([Decimal(HUGE), None], WHOLE)])
    stored = store.read("ids.rollup.1m").to_table()
    assert stored.column("sum_id").to_pylist() == [Decimal(HUGE), Decimal(HUGE)]
    with capture_logs() as logs:
        table = reaggregate(stored, POLICY)
    assert table.schema.field("sum_id").type == pa.float64()
    assert table.column("sum_id").to_pylist() == [float(2 * HUGE)]
    assert table.column("count").to_pylist() == [3]
    widened = [e for e in logs if e["event"] == "rollup_sum_widened"]
    assert [(e["rollup"], e["metrics"], e["type"]) for e in widened] == [
        ("1m", ["sum_id"], "double")
    ]
    # One that fits stays an exact decimal.
    small = reaggregate(pa.concat_tables([stored.slice(0, 1), stored.slice(0, 0)]), POLICY)
    assert small.column("sum_id").to_pylist() == [Decimal(HUGE)]
