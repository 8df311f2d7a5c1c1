"""examples/spark/query.py on the session's SparkSession: its aggregates give the answers the
rows give, its plans show the pushdown it says, and its replica holds every row once."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from plateau_core import Store
from tests.examples_support import example_module
from tests.spark.conftest import write_segments
from tests.support import BASE_MS, batch

HOUR_MS = 3_600_000
LEVELS = ("info", "error", "warn")
SEGMENTS, ROWS = 3, 10


def level_of(offset: int) -> str:
    return LEVELS[offset % len(LEVELS)]


def app_events(data_dir: Path) -> None:
    """Topic app-events as examples/produce-direct lands it, in two partitions: segment i of
    each holds ROWS events in hour i."""
    with Store.open(data_dir) as store:
        for partition in (0, 1):
            batches = []
            for i in range(SEGMENTS):
                offsets = list(range(i * ROWS, (i + 1) * ROWS))
                times = [BASE_MS + i * HOUR_MS + o for o in offsets]
                level = pa.array([level_of(o) for o in offsets])
                batches.append(batch(offsets, times=times, extra={"level": level}))
            write_segments(store, "app-events", partition, batches, roll_rows=ROWS)


def test_spark_example_pushes_its_filters_and_replicates_every_row_once(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    query = example_module("spark/query.py")
    data_dir, replica = tmp_path / "data", tmp_path / "replica"
    app_events(data_dir)
    frame = query.topic_frame(spark, data_dir, "app-events")

    # From hour 1 on: every segment but each partition's first.
    since = datetime.fromtimestamp((BASE_MS + HOUR_MS) / 1000, UTC)
    levels = query.levels_since(frame, since)
    expected = Counter(level_of(o) for o in range(ROWS, SEGMENTS * ROWS) for _ in (0, 1))
    assert {r["level"]: r["count"] for r in levels.collect()} == expected
    scan = query.plan(levels)
    assert "PushedFilters: [" in scan and "timestamp >= " in scan
    assert "ReadSchema: struct<level:string>" in scan

    totals = query.partition_totals(frame)
    last = SEGMENTS * ROWS - 1
    assert sorted(map(tuple, totals.collect())) == [
        (0, SEGMENTS * ROWS, last),
        (1, SEGMENTS * ROWS, last),
    ]
    assert "answered from the manifest" in query.plan(totals)

    report = query.replicate_to_parquet(spark, data_dir, replica)
    assert report.rows == 2 * SEGMENTS * ROWS
    copied = query.read_replica(spark, replica, "app-events")
    assert sorted(
        (r["partition"], r["offset"]) for r in copied.select("partition", "offset").collect()
    ) == [(p, o) for p in (0, 1) for o in range(SEGMENTS * ROWS)]

    # The script as a user runs it, on this session instead of a new one.
    monkeypatch.setattr(query, "session", lambda: spark)
    hours = (datetime.now(UTC).timestamp() * 1000 - BASE_MS) / HOUR_MS + 1
    args = ["--data-dir", str(data_dir), "--replica", str(replica), "--hours", str(hours)]
    assert query.main(args) == 0
    out = capsys.readouterr().out
    assert "PushedFilters" in out and "answered from the manifest" in out
    # Nothing sealed since the first run: this one copies nothing again.
    assert "replicated 0 row(s) in 0 file(s)" in out
    assert query.main(["--data-dir", str(tmp_path / "nothing")]) == 1
