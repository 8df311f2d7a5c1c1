"""A roll-up topic whose `sum_*` column is decimal(38, 2) in some segments (sums of a
decimal(7, 2) field) and decimal(38, 0) in others (the field's integers summed past int64):
the connector reads the sums with their places, as Store.read does, refuses a plan made
before a segment with places came, and fails on a sum that the places leave no room for."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as fn

from plateau_core import Store
from tests.core.test_rollup_sum_places import BIG, CENTS, ROLLUP, _seal_each
from tests.spark.test_source import load


def test_sums_with_places_beside_integer_sums_read_as_the_store_reads_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    with Store.open(tmp_path / "data") as store:
        _seal_each(
            store,
            [
                pa.array([BIG, BIG], pa.int64()),  # past int64: decimal(38, 0)
                pa.array([3, 4], pa.int64()),
            ],
        )
        before = load(spark, store, ROLLUP)
        assert dict(before.dtypes)["sum_amount"] == "decimal(38,0)"
        _seal_each(store, [pa.array([Decimal("1.25"), Decimal("-2.50")], CENTS)], at=4)
        stored = store.read(ROLLUP).to_table()
        assert stored.schema.field("sum_amount").type == pa.decimal128(38, 2)
        expected = sorted((r["offset"], r["sum_amount"]) for r in stored.to_pylist())
        frame = load(spark, store, ROLLUP)
        assert dict(frame.dtypes)["sum_amount"] == "decimal(38,2)"
        got = sorted((r.offset, r.sum_amount) for r in frame.collect())
        total = frame.agg(fn.sum("sum_amount").alias("total")).collect()[0].total
        cents = [r.offset for r in frame.filter(fn.col("sum_amount") < 0).collect()]
        # The plan made before the segment with places came would cut its cents.
        with pytest.raises((PySparkException, Py4JJavaError), match="Load the DataFrame again"):
            before.select("sum_amount").collect()
    assert got == expected
    assert Decimal("-1.25") in {s for _, s in got}
    assert total == Decimal(2 * BIG) + Decimal("5.75")
    assert cents == [4]


def test_a_sum_the_places_leave_no_room_for_fails_the_query_named(
    spark: SparkSession, tmp_path: Path
) -> None:
    with Store.open(tmp_path / "data") as store:
        _seal_each(
            store,
            [
                pa.array([Decimal(10**36)], pa.decimal128(38, 0)),
                pa.array([Decimal("1.25")], pa.decimal128(38, 2)),
            ],
        )
        frame = load(spark, store, ROLLUP)
        assert dict(frame.dtypes)["sum_amount"] == "decimal(38,2)"
        problem = f"column 'sum_amount' holds {10**36}, which the topic's merged type"
        with pytest.raises((PySparkException, Py4JJavaError), match=problem):
            frame.select("sum_amount").collect()
