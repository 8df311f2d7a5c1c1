"""Spark over plateau: the data source against Parquet, pruning, replication throughput.

Builds (or reuses, with --data-dir) the read benchmark's store (rows over 8 partitions,
timestamps rising evenly over a span, ~100 segments), then in one run and one SparkSession:

- replication: the store copied to Parquet in this process (write tasks, no Spark: the
  baseline) and by the Spark job `plateau replicate` runs; MB/s of segment bytes read;
- full scan, through the plateau source and through spark.read.parquet of the replica:
  `count()` and a groupBy(partition) summing length(value) (every value read);
- Spark's floor: `spark.range(10).count()`, what any SQL query costs on the machine;
- a 1% time-range query (count and sum of value lengths) with pushdown (pruning at the
  manifest and by the per-batch index) and with option("pushdown", "false") (every segment
  read, Spark filters).

Each query runs once to warm up, then --repeat times; the median counts. Results go to
bench/results/query-<ts>.json.

    .venv/bin/python bench/query_bench.py
    .venv/bin/python bench/query_bench.py --rows 2000000 --repeat 1     # quicker
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyspark
from benchdata import MB, machine_info, median, peak_rss_bytes, quiet_logs
from benchdata import write_results as save
from pyspark.sql import functions as fn
from read_bench import TOPIC, add_store_arguments, build_settings, ensure_store, windows

from plateau_core import Store
from plateau_spark import session
from plateau_spark.replication import Replicator, Target, write_task

TARGET_SCAN_RATIO = 0.7
TARGET_PRUNING = 20.0


def timed(name: str, repeat: int, run: Callable[[], Any]) -> dict[str, Any]:
    answer = run()  # warm-up: page cache, Python workers, JIT
    seconds = []
    for i in range(repeat):
        started = time.perf_counter()
        again = run()
        seconds.append(time.perf_counter() - started)
        if again != answer:
            raise SystemExit(f"{name}: run {i + 1} answered {again}, the warm-up {answer}")
        print(f"#{i + 1} {name:>22}: {seconds[-1]:7.3f} s", flush=True)
    return {"seconds_median": median(seconds), "seconds_all": seconds, "answer": answer}


def replicate(store: Store, spark: Any, work: Path) -> dict[str, Any]:
    baseline_target = Target.parse(str(work / "baseline"))
    tasks = Replicator(store, baseline_target).plan()
    started = time.perf_counter()
    for task in tasks:
        write_task(task)
    baseline_s = time.perf_counter() - started
    segment_bytes = sum(t.size_bytes for t in tasks)
    report = Replicator(store, Target.parse(str(work / "replica"))).run_once(spark)
    if report.bytes_read != segment_bytes:
        raise SystemExit(f"replicated {report.bytes_read} bytes of {segment_bytes}")
    return {
        "files": report.files,
        "rows": report.rows,
        "segment_bytes": segment_bytes,
        "parquet_bytes": report.bytes_written,
        "spark_seconds": report.seconds,
        "spark_mb_per_s": segment_bytes / MB / report.seconds,
        "in_process_seconds": baseline_s,
        "in_process_mb_per_s": segment_bytes / MB / baseline_s,
        "spark_vs_in_process": baseline_s / report.seconds,
    }


def measure(args: argparse.Namespace, data_dir: Path, work: Path) -> dict[str, Any]:
    spark = session(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    with Store.open(data_dir) as store:
        replication = replicate(store, spark, work)
        start, end = windows(store, build_settings(args), args.fraction)["range"]
    plateau = spark.read.format("plateau").option("path", str(data_dir)).option("topic", TOPIC)
    source = plateau.load()
    parquet = spark.read.parquet(str(work / "replica" / TOPIC))
    lo = datetime.fromtimestamp(start / 1000, UTC)
    hi = datetime.fromtimestamp(end / 1000, UTC)
    window = f"timestamp >= '{lo.isoformat()}' AND timestamp < '{hi.isoformat()}'"

    def summed(frame: Any) -> tuple[int, int]:
        row = frame.selectExpr("count(*)", "sum(length(value))").first()
        return (row[0], row[1])

    def range_query(frame: Any) -> tuple[int, int]:
        return summed(frame.filter(window))

    unpruned = plateau.option("pushdown", "false").load()

    queries: dict[str, Callable[[], Any]] = {
        "plateau count": source.count,
        "parquet count": parquet.count,
        "plateau groupBy": lambda: _group(source),
        "parquet groupBy": lambda: _group(parquet),
        "plateau range pushdown": lambda: range_query(source),
        "plateau range no pushdown": lambda: range_query(unpruned),
        "parquet range": lambda: range_query(parquet),
        # Spark's own floor for a SQL query on this machine: no data source, ten rows.
        "spark empty query": lambda: spark.range(10).selectExpr("count(*)").first()[0],
    }
    results = {name: timed(name, args.repeat, run) for name, run in queries.items()}
    before = process_cpu()
    source.count()
    split = {k: v - before.get(k, 0.0) for k, v in process_cpu().items()}
    for a, b in (("plateau count", "parquet count"), ("plateau groupBy", "parquet groupBy")):
        if results[a]["answer"] != results[b]["answer"]:
            raise SystemExit(f"{a} and {b} disagree: {results[a]['answer']} {results[b]['answer']}")
    spark.stop()
    return {
        "replication": replication,
        "queries": results,
        "window": [start, end],
        "plateau_count_cpu_seconds": split,
    }


def process_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's descendants, as the Spark JVM ("jvm") and the
    Python workers ("python workers"), from /proc (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            head, _, rest = (entry / "stat").read_text().rpartition(")")
            fields = rest.split()
        except OSError:
            continue
        pid, name = int(entry.name), head.partition("(")[2]
        children.setdefault(int(fields[1]), []).append(pid)
        stats[pid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    totals: dict[str, float] = {}
    pending = list(children.get(os.getpid(), []))
    while pending:
        pid = pending.pop()
        pending += children.get(pid, [])
        name, seconds = stats.get(pid, ("", 0.0))
        kind = "jvm" if name == "java" else "python workers"
        totals[kind] = totals.get(kind, 0.0) + seconds
    return totals


def _group(frame: Any) -> list[tuple[Any, ...]]:
    """Rows and value bytes per partition: reads every value."""
    rows = frame.groupBy("partition").agg(fn.count("*"), fn.sum(fn.length("value"))).collect()
    return sorted(tuple(r) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_store_arguments(parser)
    parser.add_argument("--repeat", type=int, default=3, help="runs per query; the median counts")
    parser.add_argument("--master", default="local[*]", help="Spark master")
    parser.add_argument("--data-dir", type=Path, help="build the store here once and reuse it")
    args = parser.parse_args()
    quiet_logs()
    data_dir = (args.data_dir or Path(tempfile.mkdtemp(prefix="plateau-query-"))).resolve()
    work = Path(tempfile.mkdtemp(prefix="plateau-query-out-"))
    try:
        built = ensure_store(args, data_dir)
        print(
            "store reused" if built["reused"] else f"store built in {built['build_seconds']:.1f} s"
        )
        measured = measure(args, data_dir, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    q = {name: r["seconds_median"] for name, r in measured["queries"].items()}
    ratios = {
        "scan_count_vs_parquet": q["parquet count"] / q["plateau count"],
        "scan_groupby_vs_parquet": q["parquet groupBy"] / q["plateau groupBy"],
        "pruning_speedup": q["plateau range no pushdown"] / q["plateau range pushdown"],
        "pruned_query_vs_spark_floor": q["plateau range pushdown"] / q["spark empty query"],
    }
    payload = {
        "benchmark": "query",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            **machine_info(Path(tempfile.gettempdir())),
            "work_dir": "<tmp>",
            "pyspark": pyspark.__version__,
        },
        "settings": {**build_settings(args), "fraction": args.fraction, "repeat": args.repeat},
        "build": built,
        **measured,
        "ratios": ratios,
        "targets": {"scan_vs_parquet": TARGET_SCAN_RATIO, "pruning_speedup": TARGET_PRUNING},
        "driver_peak_rss_bytes": peak_rss_bytes(),
    }
    path = save("query", payload)
    rep = measured["replication"]
    print(
        f"\nreplication: {rep['segment_bytes'] / MB:.0f} MB of segments -> {rep['files']} files, "
        f"{rep['parquet_bytes'] / MB:.0f} MB Parquet; Spark job {rep['spark_mb_per_s']:.1f} MB/s, "
        f"in-process {rep['in_process_mb_per_s']:.1f} MB/s"
    )
    for name, seconds in q.items():
        print(f"{name:>26}: {seconds:7.3f} s")
    for name, value in ratios.items():
        print(f"{name:>26}: {value:7.2f}")
    cpu = measured["plateau_count_cpu_seconds"]
    print("plateau count CPU seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
