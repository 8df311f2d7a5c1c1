"""Spark Structured Streaming for bench/freshness_bench.py, run as its own process.

    python bench/freshness_spark.py --bootstrap B --topic T --out DIR --trigger-seconds 1

Reads T from the earliest offsets with the Kafka connector into a Parquet sink at DIR
(checkpoint inside DIR) with `trigger(processingTime=...)`, until SIGTERM, when it stops the
query and exits. A batch is visible to a reader of DIR once Spark's file sink commits it to
DIR/_spark_metadata, which is what the benchmark watches.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from types import FrameType

from pyspark.sql import SparkSession
from spark_kafka_jars import connector_jars


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    stop = threading.Event()

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    # Loopback only: otherwise the driver binds the host's first interface address.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(args.master)
        .appName("plateau-freshness-spark")
        .config("spark.jars", ",".join(str(p) for p in connector_jars()))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("partition", "offset", "timestamp", "key", "value")
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(args.out))
        .option("checkpointLocation", str(args.out / "_checkpoint"))
        .trigger(processingTime=f"{args.trigger_seconds} seconds")
        .start()
    )
    print("started", flush=True)
    while not stop.is_set() and query.isActive:
        stop.wait(0.2)
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
