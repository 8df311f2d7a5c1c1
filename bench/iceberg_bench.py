"""Replication into Iceberg tables beside Parquet replication, and Spark over the table.

Builds (or reuses, with --data-dir) the read benchmark's store, then, in one run and one
SparkSession, replicates the same sealed segments --repeat times each way, each time from a
fresh copy of the store (the copy is not timed):

- baseline: plateau's pyarrow write tasks in this process (Parquet, nothing recorded);
- parquet: `plateau replicate` with format parquet (the connector and Spark's writer);
- iceberg: `plateau replicate` with format iceberg (pyarrow files in this process, one
  pyiceberg commit to a SQLite SQL catalog, the manifest updated).

MB/s are of segment bytes; the ratios are against the baseline of the same run. Then the
same Spark queries (count; groupBy(partition) summing length(value)) through the plateau
source and over the Iceberg table (planned by pyiceberg, read by Spark's Parquet reader:
docs/spark.md says why not Spark's Iceberg runtime). Results go to
bench/results/iceberg-<ts>.json.

    .venv/bin/python bench/iceberg_bench.py --rows 2000000 --segment-rows 20000
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyspark
from benchdata import MB, command_line, machine_info, median, quiet_logs
from benchdata import write_results as save
from query_bench import _group, timed
from read_bench import TOPIC, add_store_arguments, build_settings, ensure_store

from plateau_core import Store
from plateau_spark import session
from plateau_spark.iceberg_read import iceberg_frame
from plateau_spark.replication import IcebergReplicator, Replicator, Target, write_task


def copy_of(data_dir: Path, work: Path) -> Path:
    copy = work / "store"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(data_dir, copy, ignore=shutil.ignore_patterns("replication.lock"))
    return copy


def one_run(kind: str, data_dir: Path, work: Path, spark: Any) -> tuple[float, int, int]:
    """(seconds, segment bytes, bytes written) of one replication of a fresh store copy."""
    store_dir = copy_of(data_dir, work)
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    with Store.open(store_dir) as store:
        if kind == "baseline":
            tasks = Replicator(store, Target.parse(str(out))).plan()
            started = time.perf_counter()
            files = [f for task in tasks for f in write_task(task)]
            seconds = time.perf_counter() - started
            return seconds, sum(t.size_bytes for t in tasks), sum(f.bytes for f in files)
        if kind == "parquet":
            report = Replicator(store, Target.parse(str(out))).run_once(spark)
        else:
            report = IcebergReplicator(store, Target.parse(str(out))).run_once()
        return report.seconds, report.bytes_read, report.bytes_written


def replication(data_dir: Path, work: Path, spark: Any, repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for kind in ("baseline", "parquet", "iceberg"):
        runs = [one_run(kind, data_dir, work, spark) for _ in range(repeat)]
        seconds = [r[0] for r in runs]
        segment_bytes = runs[0][1]
        results[kind] = {
            "seconds_all": seconds,
            "seconds_median": median(seconds),
            "segment_bytes": segment_bytes,
            "bytes_written": runs[0][2],
            "mb_per_s": segment_bytes / MB / median(seconds),
        }
        print(f"{kind:>9}: {median(seconds):6.2f} s, {results[kind]['mb_per_s']:6.1f} MB/s")
    base = results["baseline"]["seconds_median"]
    for kind in ("parquet", "iceberg"):
        results[kind]["vs_baseline"] = base / results[kind]["seconds_median"]
    return results


def queries(data_dir: Path, work: Path, spark: Any, repeat: int) -> dict[str, Any]:
    """The last Iceberg run's table against the plateau source of the original store."""
    with Store.open(work / "store") as store:
        table = IcebergReplicator(store, Target.parse(str(work / "out"))).table(TOPIC)
    source = spark.read.format("plateau").option("path", str(data_dir)).option("topic", TOPIC)
    plateau = source.load()
    iceberg = iceberg_frame(spark, table)
    runs: dict[str, Callable[[], Any]] = {
        "plateau count": plateau.count,
        "iceberg count": iceberg.count,
        "plateau groupBy": lambda: _group(plateau),
        "iceberg groupBy": lambda: _group(iceberg),
    }
    results = {name: timed(name, repeat, run) for name, run in runs.items()}
    for a, b in (("plateau count", "iceberg count"), ("plateau groupBy", "iceberg groupBy")):
        if results[a]["answer"] != results[b]["answer"]:
            raise SystemExit(f"{a} and {b} disagree: {results[a]['answer']} {results[b]['answer']}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_store_arguments(parser)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the median counts")
    parser.add_argument("--master", default="local[*]", help="Spark master")
    parser.add_argument("--data-dir", type=Path, help="build the store here once and reuse it")
    args = parser.parse_args()
    quiet_logs()
    data_dir = (args.data_dir or Path(tempfile.mkdtemp(prefix="plateau-iceberg-"))).resolve()
    work = Path(tempfile.mkdtemp(prefix="plateau-iceberg-out-"))
    spark = session(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        built = ensure_store(args, data_dir)
        replicated = replication(data_dir, work, spark, args.repeat)
        queried = queries(data_dir, work, spark, args.repeat)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    q = {name: r["seconds_median"] for name, r in queried.items()}
    ratios = {
        "iceberg_vs_parquet_replication": replicated["parquet"]["seconds_median"]
        / replicated["iceberg"]["seconds_median"],
        "iceberg_count_vs_plateau": q["plateau count"] / q["iceberg count"],
        "iceberg_groupby_vs_plateau": q["plateau groupBy"] / q["iceberg groupBy"],
    }
    for name, value in ratios.items():
        print(f"{name:>32}: {value:6.2f}")
    payload = {
        "benchmark": "iceberg",
        "command": command_line(),
        "machine": {
            **machine_info(Path(tempfile.gettempdir())),
            "work_dir": "<tmp>",
            "pyspark": pyspark.__version__,
        },
        "settings": build_settings(args),
        "build": built,
        "repeat": args.repeat,
        "replication": replicated,
        "queries": queried,
        "ratios": ratios,
    }
    print(f"\nresults: {save('iceberg', payload)}")


if __name__ == "__main__":
    main()
