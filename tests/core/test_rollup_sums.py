"""Roll-up sums of integers past int64: exact, held as decimal(38, 0) in the segment or the
answer that needs it, never wrapped; every other sum keeps Arrow's integer type."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
from structlog.testing import capture_logs

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.rollup import EXACT_SUM, RollupPolicy, reaggregate, rollup_metrics, rollup_table
from tests.support import append_patiently

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000
BIG = 2**62 + 1  # two of them pass int64
POLICY = RollupPolicy("1m", 60_000, ("service",), rollup_metrics(["count", "sum:bytes"]))


def _segment(offsets: list[int], services: list[str], values: pa.Array) -> pa.Table:
    return pa.table(
        {
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([BASE_MS + o for o in offsets], TS),
            "service": services,
            "bytes": values,
        }
    )


def test_a_bucket_whose_sum_passes_int64_seals_as_an_exact_decimal() -> None:
    table = _segment([0, 1, 2], ["a", "a", "b"], pa.array([BIG, BIG, 7], pa.int64()))
    with capture_logs() as logs:
        rolled = rollup_table(table, POLICY, topic="logs", partition=0)
    assert rolled.schema.field("sum_bytes").type == EXACT_SUM
    assert rolled.column("sum_bytes").to_pylist() == [Decimal(2 * BIG), Decimal(7)]
    assert rolled.schema.field("count").type == pa.int64()
    widened = [e for e in logs if e["event"] == "rollup_sum_widened"]
    assert [(e["topic"], e["partition"], e["start_offset"], e["end_offset"]) for e in widened] == [
        ("logs", 0, 0, 2)
    ]


def test_large_values_whose_sums_fit_keep_the_integer_type() -> None:
    signed = _segment([0, 1], ["a", "a"], pa.array([BIG, -BIG + 5], pa.int64()))
    rolled = rollup_table(signed, POLICY)
    assert rolled.schema.field("sum_bytes").type == pa.int64()
    assert rolled.column("sum_bytes").to_pylist() == [5]
    # Past int64 but within uint64: an unsigned column sums as uint64, as Arrow types it.
    unsigned = _segment([0, 1], ["a", "a"], pa.array([BIG, BIG], pa.uint64()))
    rolled = rollup_table(unsigned, POLICY)
    assert rolled.schema.field("sum_bytes").type == pa.uint64()
    assert rolled.column("sum_bytes").to_pylist() == [2 * BIG]
    past = _segment([0, 1, 2, 3], ["a"] * 4, pa.array([BIG] * 4, pa.uint64()))
    assert rollup_table(past, POLICY).column("sum_bytes").to_pylist() == [Decimal(4 * BIG)]


def test_re_aggregating_int64_sums_that_add_up_past_int64_answers_exactly() -> None:
    first = rollup_table(_segment([0], ["a"], pa.array([BIG], pa.int64())), POLICY)
    second = rollup_table(_segment([1, 2], ["a", "b"], pa.array([BIG, 3], pa.int64())), POLICY)
    assert first.schema.field("sum_bytes").type == pa.int64()
    table = reaggregate(pa.concat_tables([first, second]), POLICY)
    assert table.select(["service", "count", "sum_bytes"]).to_pylist() == [
        {"service": "a", "count": 2, "sum_bytes": Decimal(2 * BIG)},
        {"service": "b", "count": 1, "sum_bytes": Decimal(3)},
    ]
    small = reaggregate(pa.concat_tables([first, first.slice(0, 0)]), POLICY)
    assert small.schema.field("sum_bytes").type == pa.int64()


def test_a_widened_roll_up_segment_reads_beside_int64_ones(store: Store) -> None:
    """Sealed through the writer: one roll-up segment with an int64 sum, one whose bucket
    passed int64; the topic reads them as decimals and re-aggregates exactly."""
    writer = store.writer(WriterPolicy(fsync=False))
    values = [[1, 2], [BIG, BIG]]
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_rows=2, max_age_s=3600), rollups=(POLICY,))
        for at, part in enumerate(values):
            offsets = [2 * at, 2 * at + 1]
            batch = pa.RecordBatch.from_pydict(
                _segment(offsets, ["a", "a"], pa.array(part, pa.int64())).to_pydict(),
                schema=_segment([0], ["a"], pa.array([0], pa.int64())).schema,
            )
            append_patiently(writer, "logs", 0, batch)
        writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)
    assert len(store.manifest.segments("logs.rollup.1m")) == 2
    stored = store.read("logs.rollup.1m").to_table()
    assert stored.column("sum_bytes").to_pylist() == [Decimal(3), Decimal(2 * BIG)]
    table = reaggregate(stored, POLICY)
    assert table.select(["count", "sum_bytes"]).to_pylist() == [
        {"count": 4, "sum_bytes": Decimal(2 * BIG + 3)}
    ]
