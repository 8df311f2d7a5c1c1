"""A roll-up topic through the connector: queried like any topic, its re-aggregated counts
equal the raw rows'."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as fn

from plateau_core import Store
from tests.core.test_rollups import _rows, _write
from tests.spark.test_source import load


def test_a_rollup_topic_is_queried_like_any_topic(spark: SparkSession, tmp_path: Path) -> None:
    rows = _rows(3, 600)
    with Store.open(tmp_path / "data") as store:
        _write(store, rows, 100)
        rolled = load(spark, store, "logs.rollup.1m")
        errors = (
            rolled.filter("level = 'ERROR'")
            .groupBy("timestamp", "service")
            .agg(fn.sum("count").alias("n"))
            .collect()
        )
    expected: dict[tuple[int, str], int] = {}
    for r in rows:
        if r["level"] == "ERROR":
            key = (r["timestamp"] // 60_000 * 60_000, r["service"])
            expected[key] = expected.get(key, 0) + 1
    got = {(round(e.timestamp.timestamp() * 1000), e.service): e.n for e in errors}
    assert got == expected
