"""A roll-up's sums of one measure held as decimal(38, 2) in some segments (a decimal(7, 2)
field) and decimal(38, 0) in others (the field's integers summed past int64) read with
their places, as the raw read of the same values keeps them: 38 digits of a sum are Arrow's
sum type, not whole digits its values take."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.conform import UnrepresentableValueError
from plateau_core.rollup import RollupPolicy, reaggregate, rollup_metrics
from plateau_core.schema import FIXED_FIELDS
from plateau_core.schema_merge import merge_schemas
from tests.support import append_patiently

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000
BIG = 2**62 + 1  # two of them pass int64
CENTS = pa.decimal128(7, 2)
POLICY = RollupPolicy("1m", 60_000, (), rollup_metrics(["count", "sum:amount"]))
ROLLUP = "pay.rollup.1m"


def _seal_each(store: Store, parts: list[pa.Array], *, at: int = 0) -> None:
    """Each of `parts` as the `amount` column of its own raw segment, in one bucket, from
    offset `at`."""
    sealed = len(store.manifest.segments(ROLLUP))
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("pay", 0, roll=RollPolicy(max_age_s=3600), rollups=(POLICY,))
        offset = at
        for amounts in parts:
            offsets = list(range(offset, offset + len(amounts)))
            offset += len(amounts)
            batch = pa.RecordBatch.from_pydict(
                {
                    "offset": pa.array(offsets, pa.int64()),
                    "timestamp": pa.array([BASE_MS + o for o in offsets], TS),
                    "amount": amounts,
                }
            )
            append_patiently(writer, "pay", 0, batch)
            writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)
    assert len(store.manifest.segments(ROLLUP)) == sealed + len(parts)


def _stored_sum_types(store: Store) -> set[str]:
    schemas = store.manifest.schemas(ROLLUP).values()
    return {str(s.field("sum_amount").type) for s in schemas}


def test_sums_with_places_beside_integer_sums_past_int64_keep_their_places(
    store: Store,
) -> None:
    _seal_each(
        store,
        [
            pa.array([BIG, BIG], pa.int64()),
            pa.array([Decimal("1.25"), Decimal("-2.50")], CENTS),
            pa.array([3, 4], pa.int64()),
        ],
    )
    assert _stored_sum_types(store) == {"decimal128(38, 0)", "decimal128(38, 2)", "int64"}
    raw = store.read("pay").to_table()
    assert raw.schema.field("amount").type == pa.decimal128(21, 2)
    rolled = store.read(ROLLUP).to_table()
    assert rolled.schema.field("sum_amount").type == pa.decimal128(38, 2)
    assert rolled.column("sum_amount").to_pylist() == [
        Decimal(2 * BIG),
        Decimal("-1.25"),
        Decimal(7),
    ]
    # Re-aggregated, the answer is what the raw rows add up to, cents and all.
    (row,) = reaggregate(rolled, POLICY).select(["count", "sum_amount"]).to_pylist()
    assert row == {"count": 6, "sum_amount": sum(raw.column("amount").to_pylist())}
    assert row["sum_amount"] == Decimal(2 * BIG) + Decimal("5.75")


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([*FIXED_FIELDS, *(pa.field(n, t) for n, t in fields)])


def test_only_a_rollup_topics_sums_merge_by_their_places() -> None:
    wide, cents = pa.decimal128(38, 0), pa.decimal128(38, 2)
    schemas = [_schema(("sum_x", wide), ("x", wide)), _schema(("sum_x", cents), ("x", cents))]
    rolled = merge_schemas(schemas, "t.rollup.1m")
    assert (rolled.field("sum_x").type, rolled.field("x").type) == (cents, wide)
    # A raw topic's column, and one of a topic merely named like a sum, keep the raw rule:
    # every whole digit held.
    assert merge_schemas(schemas, "t").field("sum_x").type == wide
    assert merge_schemas(schemas).field("sum_x").type == wide
    # Integer sums keep their whole digits; past 38 digits the places give way.
    many = [_schema(("sum_x", pa.decimal128(38, 20))), _schema(("sum_x", pa.uint64()))]
    assert merge_schemas(many, "t.rollup.1m").field("sum_x").type == pa.decimal128(38, 18)
    # A dimension called sum_* whose decimals are no sums' 38 digits merges as a column does.
    narrow = [_schema(("sum_x", t)) for t in (pa.decimal128(30, 0), wide, cents)]
    assert merge_schemas(narrow, "t.rollup.1m").field("sum_x").type == wide


def test_a_sum_with_more_whole_digits_than_the_places_leave_fails_the_read_named(
    store: Store,
) -> None:
    """A decimal(38, 0) field's sum of 37 digits beside sums with cents: decimal(38, 2)
    holds 36 whole digits, and the read says which segment and column hold the value."""
    _seal_each(
        store,
        [
            pa.array([Decimal(10**36)], pa.decimal128(38, 0)),
            pa.array([Decimal("1.25")], pa.decimal128(38, 2)),
        ],
    )
    with pytest.raises(UnrepresentableValueError) as failed:
        store.read(ROLLUP).to_table()
    first = min(store.manifest.segments(ROLLUP), key=lambda s: s.start_offset)
    message = str(failed.value)
    assert f"topic {ROLLUP!r} partition 0, segment {first.id}" in message
    assert first.path in message
    assert "column 'sum_amount'" in message
