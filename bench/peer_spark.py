"""Peer of bench/ingest_bench.py: Spark Structured Streaming from Kafka into Parquet; one JSON line.

    python bench/peer_spark.py --bootstrap B --topic T --expected N --out DIR \
        [--master local[2]] [--max-offsets-per-trigger K] [--driver-memory 4g] \
        [--connector-version V]      # or $PLATEAU_SPARK_KAFKA_VERSION; default: pyspark's

What a Spark user would run to land a topic as files: a local-mode SparkSession with the
Kafka connector (bench/spark_kafka_jars.py, resolved beforehand so that no download is
timed) reads T with `spark.readStream.format("kafka")` from the earliest offsets, selects
the columns plateau stores (value, key, offset, partition, timestamp) and writes them with
the Parquet file sink to DIR (checkpoint in DIR/_checkpoint), `trigger(availableNow=True)`:
everything in the topic when the query starts, then the query stops by itself. Spark's
defaults stay as they are (snappy Parquet, one task per Kafka partition, no
maxOffsetsPerTrigger, so one micro-batch) except what a user sets for a local job: driver
memory, UTC, no web UI or progress bar, and the driver bound to 127.0.0.1.

`done` is when awaitTermination() returned: the micro-batch's files are written and listed
in DIR/_spark_metadata (the file sink's commit log, which is what makes them visible to
readers) and the offsets are committed to the checkpoint. Neither the files nor the log
are fsynced (Hadoop's local file system does not sync on close). `session_started` is when the
SparkSession was up (JVM start, the cost every Spark job pays once); `query_started` is when
start() returned. There is no cheap way to see the first record read inside a single
micro-batch, so `first_record` is null. After `done`, not timed, `spark.read.parquet(DIR)`
must count exactly `expected` rows (reported as `records`), otherwise the run fails.

Times are CLOCK_MONOTONIC, so the parent can relate them to its own. `cpu_s_at_done` is the
whole process tree (this interpreter and the JVM it started), read from /proc at `done`.
The JVM is waited for before exit, so the parent's rusage of this process includes it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql import SparkSession
from spark_kafka_jars import CONNECTOR, ConnectorError, connector_jars

STARTED = time.monotonic()
CLK_TCK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root: int) -> float:
    """CPU seconds of `root` and its live descendants (user + system, from /proc)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLK_TCK)
    total = 0.0
    todo = [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(child for child, (ppid, _) in stats.items() if ppid == pid)
    return total


def session(master: str, jars: list[Path], driver_memory: str) -> SparkSession:
    # Spark binds the driver (RPC, block manager) to the address of the host name unless
    # told otherwise; the benchmark keeps everything on the loopback interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return (
        SparkSession.builder.master(master)
        .appName("plateau-bench-peer-spark")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        # The progress bar would fill the stderr that the parent keeps for errors.
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        # A checkpoint left there would make the query resume instead of reading from 0.
        raise SystemExit(f"{out} is not empty; the sink and its checkpoint must start fresh")
    out.mkdir(parents=True, exist_ok=True)
    try:
        jars = connector_jars(args.connector_version)
    except ConnectorError as exc:
        raise SystemExit(str(exc)) from exc

    spark = session(args.master, jars, args.driver_memory)
    session_started = time.monotonic()
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    query = (
        reader.load()
        .select("value", "key", "offset", "partition", "timestamp")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(out / "_checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query_started = time.monotonic()
    if not query.awaitTermination(args.timeout):
        query.stop()
        raise SystemExit(f"the query did not finish within {args.timeout:.0f}s")
    done = time.monotonic()
    gateway, jvm = spark.sparkContext._gateway, spark.sparkContext._jvm
    if gateway is None or jvm is None:
        raise SystemExit("the SparkSession has no JVM gateway")
    jvm_pid = gateway.proc.pid
    cpu_at_done = tree_cpu_s(os.getpid())

    progress = [json.loads(p.json) for p in query.recentProgress]
    rows = spark.read.parquet(str(out)).count()
    files = [p for p in out.rglob("*.parquet") if "_checkpoint" not in p.parts]
    report: dict[str, Any] = {
        "started": STARTED,
        "session_started": session_started,
        "query_started": query_started,
        "first_record": None,
        "done": done,
        "records": rows,
        "cpu_s_at_done": round(cpu_at_done, 2),
        "batches": len(progress),
        "input_rows": sum(p.get("numInputRows", 0) for p in progress),
        "batch_duration_ms": [p.get("durationMs", {}) for p in progress],
        "files": len(files),
        "sink_bytes": sum(p.stat().st_size for p in files),
        "versions": {
            "pyspark": pyspark.__version__,
            "spark": spark.version,
            "connector": next(
                (j.name.removesuffix(".jar") for j in jars if j.name.startswith(CONNECTOR[1])),
                None,
            ),
            "kafka_clients": next(
                (j.name.removesuffix(".jar") for j in jars if j.name.startswith("kafka-clients")),
                None,
            ),
            "java": jvm.java.lang.System.getProperty("java.version"),
        },
        "config": {
            "master": args.master,
            "driver_memory": args.driver_memory,
            "max_offsets_per_trigger": args.max_offsets_per_trigger,
            "parquet_compression": spark.conf.get("spark.sql.parquet.compression.codec"),
        },
    }
    if rows != args.expected:
        raise SystemExit(f"the Parquet sink at {out} holds {rows} rows, not {args.expected}")
    spark.stop()
    # The JVM exits once its stdin closes; waiting for it puts its CPU and memory in this
    # process's rusage, which is how the parent accounts for children.
    gateway.proc.stdin.close()
    gateway.proc.wait(60)
    report["jvm_pid"] = jvm_pid
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--expected", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="Parquet sink folder (fresh)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=0, help="0: unset")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--connector-version", help="default: pyspark's own version")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)
    print(json.dumps(run(args)))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: not part of the measurement


if __name__ == "__main__":
    sys.exit(main())
