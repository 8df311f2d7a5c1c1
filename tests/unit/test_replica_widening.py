"""Which type changes the replicas migrate (the widenings the store's readers do), what a
Parquet replica's recorded types become, and a file rewritten with a column widened."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plateau_spark.replication.parquet_migration import reconcile
from plateau_spark.replication.widening import casts_for, rewrite_parquet, widens

STRUCT = pa.struct([pa.field("ms", pa.int64())])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (pa.int64(), pa.float64()),
        (pa.int32(), pa.int64()),
        (pa.float32(), pa.float64()),
        (pa.uint32(), pa.int64()),
        (pa.int64(), pa.decimal128(20, 0)),
        (pa.timestamp("ms"), pa.timestamp("us")),
        (pa.timestamp("us"), pa.timestamp("us", tz="UTC")),
        (pa.timestamp("us", tz="Europe/Paris"), pa.timestamp("us", tz="UTC")),
        (STRUCT, pa.struct([pa.field("ms", pa.float64())])),
        (STRUCT, pa.struct([pa.field("ms", pa.int64()), pa.field("s", pa.string())])),
        (pa.list_(pa.field("element", pa.int64())), pa.list_(pa.float64())),
        (pa.map_(pa.string(), pa.int32()), pa.map_(pa.string(), pa.int64())),
        (pa.null(), pa.int64()),
    ],
)
def test_what_the_store_reads_as_the_wider_type_is_a_widening(
    old: pa.DataType, new: pa.DataType
) -> None:
    assert widens(old, new, "t", "n")
    assert not widens(new, old, "t", "n")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (pa.int64(), pa.string()),  # a clash: read as JSON text, no widening
        (pa.float64(), pa.int64()),
        (pa.timestamp("us", tz="UTC"), pa.timestamp("us")),
        (pa.int64(), pa.int64()),
        # What Parquet does not tell apart, or names differently, is the same type.
        (pa.large_string(), pa.string()),
        (pa.list_(pa.field("element", pa.int64())), pa.list_(pa.int64())),
        (pa.struct([pa.field("ms", pa.int64()), pa.field("s", pa.string())]), STRUCT),
    ],
)
def test_anything_else_is_no_widening(old: pa.DataType, new: pa.DataType) -> None:
    assert not widens(old, new, "t", "n")


WHOLE_SUMS, CENT_SUMS = pa.decimal128(38, 0), pa.decimal128(38, 2)


def test_a_rollup_topics_sums_widen_by_their_places() -> None:
    """A roll-up's sums of integers past int64 (decimal(38, 0)) beside sums of a
    decimal(7, 2) field (decimal(38, 2)) read as decimal(38, 2): the replica of the first
    migrates to it, never the other way, which cut the cents."""
    rollup = "pay.rollup.1m"
    assert widens(WHOLE_SUMS, CENT_SUMS, rollup, "sum_amount")
    assert not widens(CENT_SUMS, WHOLE_SUMS, rollup, "sum_amount")
    assert widens(pa.int64(), CENT_SUMS, rollup, "sum_amount")
    # A raw topic's column, and a roll-up's column that is no sum, keep every whole digit.
    assert widens(CENT_SUMS, WHOLE_SUMS, "pay", "sum_amount")
    assert widens(CENT_SUMS, WHOLE_SUMS, rollup, "amount")
    assert not widens(WHOLE_SUMS, CENT_SUMS, rollup, "amount")
    recorded = pa.schema([pa.field("sum_amount", WHOLE_SUMS)])
    found = reconcile(recorded, pa.schema([pa.field("sum_amount", CENT_SUMS)]), rollup)
    assert (found.widened, found.unmigrated) == (["sum_amount"], {})
    assert casts_for(recorded, found.goal, rollup) == {"sum_amount": CENT_SUMS}
    # A store whose sums are still whole writes into a replica another store widened.
    assert casts_for(found.goal, recorded, rollup) == {}


def test_the_recorded_types_take_the_store_widenings_and_new_columns_only() -> None:
    recorded = pa.schema(
        [
            pa.field("n", pa.int64()),
            pa.field("wide", pa.float64()),
            pa.field("clash", pa.int64()),
            pa.field("gone", pa.string()),
        ]
    )
    wanted = pa.schema(
        [
            pa.field("n", pa.float64()),
            pa.field("wide", pa.int64()),  # another store widened it: stays double
            pa.field("clash", pa.string()),
            pa.field("new", pa.bool_()),
        ]
    )
    found = reconcile(recorded, wanted, "t")
    assert found.widened == ["n"]
    assert found.unmigrated == {"clash": (pa.int64(), pa.string())}
    assert found.goal == pa.schema(
        [
            pa.field("n", pa.float64()),
            pa.field("wide", pa.float64()),
            pa.field("clash", pa.int64()),
            pa.field("gone", pa.string()),
            pa.field("new", pa.bool_()),
        ]
    )


def test_a_rewritten_file_keeps_its_rows_order_and_row_groups_with_the_column_widened() -> None:
    big = 2**53 + 1  # no double holds it: rounded to the nearest, as the store reads it
    table = pa.table(
        {
            "offset": pa.array(range(6), pa.int64()),
            "n": pa.array([1, None, 3, big, 5, 6], pa.int64()),
            "s": pa.array(list("abcdef")),
        },
        metadata={b"org.apache.spark.sql.parquet.row.metadata": b"{stale}"},
    )
    raw = io.BytesIO()
    pq.write_table(table, raw, row_group_size=4)
    source = pq.ParquetFile(io.BytesIO(raw.getvalue()))
    goal = pa.schema([pa.field("n", pa.float64()), pa.field("s", pa.string())])
    casts = casts_for(source.schema_arrow, goal, "t")
    assert casts == {"n": pa.float64()}
    out = io.BytesIO()
    rewrite_parquet(source, out, {"n": pa.field("n", pa.float64())}, "zstd")
    written = pq.ParquetFile(io.BytesIO(out.getvalue()))
    assert written.metadata.num_row_groups == 2
    assert written.schema_arrow.field("n").type == pa.float64()
    assert b"org.apache.spark.sql.parquet.row.metadata" not in (written.schema_arrow.metadata or {})
    rows = written.read()
    assert rows.column("offset").to_pylist() == list(range(6))
    assert rows.column("n").to_pylist() == [1.0, None, 3.0, float(2**53), 5.0, 6.0]
    assert rows.column("s").to_pylist() == list("abcdef")
