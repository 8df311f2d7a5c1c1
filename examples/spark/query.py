"""Spark over plateau's store through its connector: aggregates whose plans show what the
connector took over from Spark, then the sealed segments replicated to Parquet in a folder.

    .venv/bin/python examples/spark/query.py [--data-dir DIR] [--topic TOPIC] [--replica DIR]

By default it reads the store of examples/produce-direct (run that example first) and
writes the replica to examples/spark/replica. docs/spark.md has every option.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn

from plateau_core import Store
from plateau_spark import session
from plateau_spark.replication import ReplicationReport, Replicator, Target

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE.parent / "produce-direct" / "data"
REPLICA = HERE / "replica"


def topic_frame(spark: SparkSession, data_dir: Path, topic: str) -> DataFrame:
    # `path` is storage.data_dir; its manifest says which segments exist when each query
    # plans, so a frame sees records sealed after it was loaded (but not new columns: load
    # again for those).
    return spark.read.format("plateau").option("path", str(data_dir)).option("topic", topic).load()


def levels_since(frame: DataFrame, since: datetime) -> DataFrame:
    """Records per level since `since`. The time filter is pushed to the connector: segments
    wholly before it are never opened, and batches inside the others are skipped by their
    index; only the columns used (timestamp, level) are decoded."""
    return (
        frame.filter(fn.col("timestamp") >= fn.lit(since))
        .groupBy("level")
        .count()
        .orderBy(fn.col("count").desc(), "level")
    )


def partition_totals(frame: DataFrame) -> DataFrame:
    """Records and newest offset per partition: answered from the manifest's rows, without
    opening a segment file (count, min and max of partition, offset and timestamp)."""
    return frame.groupBy("partition").agg(
        fn.count("*").alias("records"), fn.max("offset").alias("last_offset")
    )


def plan(frame: DataFrame) -> str:
    """What explain() prints: PushedFilters, PushedAggregation and ReadSchema on the scan
    say what the connector does instead of Spark."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.explain()
    return out.getvalue()


def replicate_to_parquet(
    spark: SparkSession, data_dir: Path, folder: Path, topics: list[str] | None = None
) -> ReplicationReport:
    """Sealed segments not yet replicated, to {folder}/{topic}/date=.../partition=.../ as
    Parquet (what `plateau replicate --once` does, here from Python). A run records what it
    copied in the manifest, so the next one copies only what was sealed since; a run killed
    halfway is cleaned up by the next, and no row is ever copied twice."""
    with Store.open(data_dir) as store:
        replicator = Replicator(store, Target.parse(str(folder)), topics=topics)
        return replicator.run_once(spark)


def read_replica(spark: SparkSession, folder: Path, topic: str) -> DataFrame:
    # Plain Spark, no plateau: `date` and `partition` come from the folder names.
    return spark.read.parquet(str(folder / topic))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help="storage.data_dir")
    parser.add_argument("--topic", default="app-events")
    parser.add_argument("--replica", type=Path, default=REPLICA, help="a folder for Parquet")
    parser.add_argument("--hours", type=float, default=24.0, help="how far back to count")
    args = parser.parse_args(argv)
    if not (args.data_dir / "manifest.db").exists():
        print(f"no store in {args.data_dir}: run examples/produce-direct first", file=sys.stderr)
        return 1
    # local[*] unless $PLATEAU_SPARK_MASTER says otherwise; adds the connector's jars (built
    # once with Maven) and sets the session's time zone to UTC.
    spark = session()
    frame = topic_frame(spark, args.data_dir, args.topic)
    levels = levels_since(frame, datetime.now(UTC) - timedelta(hours=args.hours))
    levels.show()
    print(plan(levels))
    totals = partition_totals(frame)
    totals.show()
    print(plan(totals))
    report = replicate_to_parquet(spark, args.data_dir, args.replica, topics=[args.topic])
    print(f"replicated {report.rows} row(s) in {report.files} file(s) to {args.replica}")
    if (args.replica / args.topic).exists():
        read_replica(spark, args.replica, args.topic).groupBy("date", "partition").count().show()
    return 0


if __name__ == "__main__":
    sys.exit(main())
