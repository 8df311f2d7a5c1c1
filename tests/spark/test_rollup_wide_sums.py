"""A roll-up topic whose `sum_*` column is decimal(38, 0) in one segment (a bucket summed
past int64) and int64 (or uint64) in the others: the connector reads every segment's sums
as Store.read does, exactly, as decimal(38, 0)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as fn

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.rollup import EXACT_SUM, RollupPolicy, rollup_metrics
from plateau_core.segment_file import open_segment
from tests.spark.test_source import load
from tests.support import append_patiently

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000
BIG = 2**62 + 1  # two of them in a bucket pass int64
POLICY = RollupPolicy("1m", 60_000, ("service",), rollup_metrics(["count", "sum:bytes"]))
TOPIC = "logs.rollup.1m"


def _seal(store: Store, segments: list[pa.Array]) -> None:
    """Each of `segments` as the `bytes` of its own raw segment, in its own minute."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_age_s=3600), rollups=(POLICY,))
        offset = 0
        for minute, values in enumerate(segments):
            offsets = list(range(offset, offset + len(values)))
            offset += len(values)
            data = pa.RecordBatch.from_pydict(
                {
                    "offset": pa.array(offsets, pa.int64()),
                    "timestamp": pa.array([BASE_MS + minute * 60_000 + o for o in offsets], TS),
                    "service": ["a" if o % 2 else "b" for o in offsets],
                    "bytes": values,
                }
            )
            append_patiently(writer, "logs", 0, data)
            writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)


def test_decimal_sums_beside_integer_sums_read_as_the_store_reads_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    with Store.open(tmp_path / "data") as store:
        _seal(
            store,
            [
                pa.array([5, -3, 7, 2**62], pa.int64()),
                pa.array([BIG, BIG, BIG, BIG, 1], pa.int64()),  # "a" and "b" pass int64
                pa.array([2**63 + 9, 4, 5], pa.uint64()),  # "a" sums past int64, in uint64
                pa.array([-(2**63), -1], pa.int64()),  # the int64 minimum, kept
            ],
        )
        types = {
            str(open_segment(store.segment_path(s)).schema.field("sum_bytes").type)
            for s in store.manifest.segments(TOPIC)
        }
        assert types == {"int64", "uint64", str(EXACT_SUM)}
        stored = store.read(TOPIC).to_table()
        assert stored.schema.field("sum_bytes").type == EXACT_SUM
        expected = sorted(
            (r["offset"], r["service"], r["count"], r["sum_bytes"]) for r in stored.to_pylist()
        )
        frame = load(spark, store, TOPIC)
        assert dict(frame.dtypes)["sum_bytes"] == "decimal(38,0)"
        got = sorted(
            (r.offset, r.service, r["count"], r.sum_bytes)
            for r in frame.select("offset", "service", "count", "sum_bytes").collect()
        )
        total = frame.agg(fn.sum("sum_bytes").alias("total")).collect()[0].total
        # Filters on the column, which segment statistics may prune by, in each type.
        filtered = {
            bound: sorted(
                r.offset
                for r in frame.filter(fn.col("sum_bytes") > bound).select("offset").collect()
            )
            for bound in (Decimal(2**62), Decimal(2**63), Decimal(-5))
        }
        small = sorted(r.offset for r in frame.filter("sum_bytes < -100").collect())
    assert got == expected
    for bound, offsets in filtered.items():
        assert offsets == sorted(r[0] for r in expected if r[3] > bound), bound
    assert small == sorted(r[0] for r in expected if r[3] < -100)
    assert Decimal(2 * BIG) in {row[3] for row in got}
    assert total == sum(row[3] for row in expected)
