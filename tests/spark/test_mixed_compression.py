"""A partition whose segments are partly lz4 and partly uncompressed (adaptive compression,
plateau_core.adaptive_compression) reads the same through the connector and replicates the
same as Store.read reads it."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from plateau_core import RollPolicy, Store, WriterPolicy
from tests.core.test_adaptive_compression import (
    ROWS,
    compressed,
    letters_batch,
    seal_each,
    segment_files,
)
from tests.spark.iceberg_support import replicator
from tests.spark.test_source import load


def test_a_partition_of_compressed_and_uncompressed_segments_reads_the_same(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("mixed", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600))
        seal_each(writer, "mixed", [letters_batch(i * ROWS) for i in range(3)])
    finally:
        writer.close()
    assert [compressed(p) for p in segment_files(store, "mixed")] == [True, False, False]
    want = store.read("mixed").to_table().sort_by("offset")
    assert want.num_rows == 3 * ROWS
    got = load(spark, store, "mixed").orderBy("offset").toArrow()
    for name in ("offset", "timestamp", "value"):
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
    job = replicator(store, tmp_path / "warehouse")
    assert job.run_once().rows == 3 * ROWS
    held = job.table("mixed").scan().to_arrow().sort_by("offset")
    for name in ("offset", "timestamp", "value"):
        assert held.column(name).to_pylist() == want.column(name).to_pylist(), name
    store.close()
