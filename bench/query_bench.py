"""Spark over plateau: the connector against Parquet, pruning, replication throughput.

Builds (or reuses, with --data-dir) the read benchmark's store for each of --sizes (rows over
8 partitions, timestamps rising evenly over a span, ~100 segments: segment rows are a
hundredth of the rows), then, all sizes in one run and one SparkSession:

- replication: the store copied to Parquet in this process (pyarrow write tasks, no Spark:
  the baseline), by the same tasks run as Python functions in a Spark job (how `plateau
  replicate` worked before the connector), and by the Spark job `plateau replicate` runs
  now (read through the connector, written by Spark's Parquet writer); MB/s of segment bytes;
- full scan, through the plateau source and through spark.read.parquet of the replica:
  `count()` and a groupBy(partition) summing length(value) (every value read);
- Spark's floor: `spark.range(10).count()`, what any SQL query costs on the machine;
- a 1% time-range query (count and sum of value lengths) with pushdown (pruning at the
  manifest and by the per-batch index) and with option("pushdown", "false") (every segment
  read, Spark filters); and count(*) alone over the same window, which the connector answers
  while planning (the window's cut segments read on the driver).

Each query runs once to warm up, then --repeat times; the median counts. Results go to
bench/results/query-<ts>.json.

    .venv/bin/python bench/query_bench.py --sizes 10000000 20000000
    .venv/bin/python bench/query_bench.py --sizes 2000000 --repeat 1     # quicker
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyspark
from benchdata import MB, command_line, machine_info, median, peak_rss_bytes, quiet_logs
from benchdata import write_results as save
from pyspark.sql import functions as fn
from read_bench import TOPIC, add_store_arguments, build_settings, ensure_store, windows

from plateau_core import Store
from plateau_spark import session
from plateau_spark.replication import Replicator, Target, write_task

# Parquet's time / the connector's: count() at least as fast, a full group-by at 0.8 or
# better; the 1% range at least 20x faster than the same query without pushdown.
TARGETS = {
    "scan_count_vs_parquet": 1.0,
    "scan_groupby_vs_parquet": 0.8,
    "pruning_speedup": 20.0,
    "range_vs_parquet": 1.0,
}


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
    """The same segments three ways: pyarrow write tasks in this process (the baseline), the
    same tasks as Python functions in a Spark job (how `plateau replicate` ran before the
    connector), and `plateau replicate` now (the connector and Spark's Parquet writer)."""
    tasks = Replicator(store, Target.parse(str(work / "baseline"))).plan()
    started = time.perf_counter()
    for task in tasks:
        write_task(task)
    baseline_s = time.perf_counter() - started
    shutil.rmtree(work / "baseline", ignore_errors=True)
    python_tasks = Replicator(store, Target.parse(str(work / "python-tasks"))).plan()
    started = time.perf_counter()
    spark.sparkContext.parallelize(python_tasks, len(python_tasks)).map(write_task).collect()
    python_tasks_s = time.perf_counter() - started
    shutil.rmtree(work / "python-tasks", ignore_errors=True)
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
        "python_tasks_in_spark_seconds": python_tasks_s,
        "python_tasks_in_spark_mb_per_s": segment_bytes / MB / python_tasks_s,
        "in_process_seconds": baseline_s,
        "in_process_mb_per_s": segment_bytes / MB / baseline_s,
        "spark_vs_in_process": baseline_s / report.seconds,
    }


def measure(spark: Any, args: argparse.Namespace, data_dir: Path, work: Path) -> dict[str, Any]:
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
        # count(*) alone over the same window: pushed whole, the cut segments read at planning.
        "plateau range count pushdown": lambda: source.filter(window).count(),
        "plateau range count no pushdown": lambda: unpruned.filter(window).count(),
        "parquet range count": lambda: parquet.filter(window).count(),
        # Spark's own floor for a SQL query on this machine: no data source, ten rows.
        "spark empty query": lambda: spark.range(10).selectExpr("count(*)").first()[0],
    }
    results = {name: timed(name, args.repeat, run) for name, run in queries.items()}
    before = process_cpu()
    source.count()
    split = {k: v - before.get(k, 0.0) for k, v in process_cpu().items()}
    for a, b in (
        ("plateau count", "parquet count"),
        ("plateau groupBy", "parquet groupBy"),
        ("plateau range pushdown", "parquet range"),
        ("plateau range pushdown", "plateau range no pushdown"),
        ("plateau range count pushdown", "parquet range count"),
        ("plateau range count pushdown", "plateau range count no pushdown"),
    ):
        if results[a]["answer"] != results[b]["answer"]:
            raise SystemExit(f"{a} and {b} disagree: {results[a]['answer']} {results[b]['answer']}")
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
    parser.add_argument(
        "--sizes", type=int, nargs="+", help="row counts to build and measure (overrides --rows)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per query; the median counts")
    parser.add_argument("--master", default="local[*]", help="Spark master")
    parser.add_argument("--data-dir", type=Path, help="build the stores here once and reuse them")
    args = parser.parse_args()
    quiet_logs()
    root = (args.data_dir or Path(tempfile.mkdtemp(prefix="plateau-query-"))).resolve()
    sizes = args.sizes or [args.rows]
    spark = session(args.master)  # one session for every size
    spark.sparkContext.setLogLevel("ERROR")
    runs: dict[str, Any] = {}
    try:
        for rows in sizes:
            sized = argparse.Namespace(**vars(args))
            sized.rows = rows
            if args.sizes:
                sized.segment_rows = max(1, rows // 100)
            data_dir = root / str(rows) if args.sizes or args.data_dir is None else root
            work = Path(tempfile.mkdtemp(prefix="plateau-query-out-"))
            try:
                built = ensure_store(sized, data_dir)
                print(
                    f"{rows} rows: store reused"
                    if built["reused"]
                    else f"{rows} rows: store built in {built['build_seconds']:.1f} s"
                )
                measured = measure(spark, sized, data_dir, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            runs[str(rows)] = {
                "settings": {**build_settings(sized), "fraction": args.fraction},
                "build": built,
                **measured,
                "ratios": _ratios(measured),
            }
            _print(rows, runs[str(rows)])
    finally:
        spark.stop()
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    payload = {
        "benchmark": "query",
        "command": command_line(),
        "machine": {
            **machine_info(Path(tempfile.gettempdir())),
            "work_dir": "<tmp>",
            "pyspark": pyspark.__version__,
        },
        "repeat": args.repeat,
        "runs": runs,
        "targets": TARGETS,
        "driver_peak_rss_bytes": peak_rss_bytes(),
    }
    print(f"\nresults: {save('query', payload)}")


def _ratios(measured: dict[str, Any]) -> dict[str, float]:
    q = {name: r["seconds_median"] for name, r in measured["queries"].items()}
    return {
        "scan_count_vs_parquet": q["parquet count"] / q["plateau count"],
        "scan_groupby_vs_parquet": q["parquet groupBy"] / q["plateau groupBy"],
        "pruning_speedup": q["plateau range no pushdown"] / q["plateau range pushdown"],
        "range_vs_parquet": q["parquet range"] / q["plateau range pushdown"],
        "pruned_query_vs_spark_floor": q["plateau range pushdown"] / q["spark empty query"],
        "range_count_pruning_speedup": (
            q["plateau range count no pushdown"] / q["plateau range count pushdown"]
        ),
        "range_count_vs_parquet": q["parquet range count"] / q["plateau range count pushdown"],
    }


def _print(rows: int, run: dict[str, Any]) -> None:
    rep = run["replication"]
    print(
        f"\n{rows} rows. replication: {rep['segment_bytes'] / MB:.0f} MB of segments -> "
        f"{rep['files']} files, {rep['parquet_bytes'] / MB:.0f} MB Parquet; connector + Spark "
        f"writer {rep['spark_mb_per_s']:.1f} MB/s, Python tasks in Spark "
        f"{rep['python_tasks_in_spark_mb_per_s']:.1f} MB/s, in-process "
        f"{rep['in_process_mb_per_s']:.1f} MB/s"
    )
    for name, result in run["queries"].items():
        print(f"{name:>26}: {result['seconds_median']:7.3f} s")
    for name, value in run["ratios"].items():
        target = TARGETS.get(name)
        verdict = (
            ""
            if target is None
            else f"  (target {target}: {'met' if value >= target else 'NOT met'})"
        )
        print(f"{name:>26}: {value:7.2f}{verdict}")
    cpu = run["plateau_count_cpu_seconds"]
    print("plateau count CPU seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()))


if __name__ == "__main__":
    main()
