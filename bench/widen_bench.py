"""What migrating a replica costs when the store widens a column (int64, then double).

Builds a store of one topic (--rows rows over --partitions partitions, segments of
--segment-rows rows: a `latency` int64 column beside 128-byte random values, or log lines
with --values log), replicates it once as Parquet (pyarrow's writer, files of --file-mb MB)
and once as an Iceberg table, then times, --repeat times each from the same replica
restored (the restore is not timed), the run that replicates one more segment in which
`latency` is a double (the run rewrites every file of the replica first), against the same
run for a segment whose `latency` is still int64 (nothing to migrate). The difference is
the migration. Results go to bench/results/widen-<ts>.json.

    .venv/bin/python bench/widen_bench.py --rows 4000000 --partitions 4 --segment-rows 100000
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from benchdata import (
    BASE_MS,
    MB,
    TIMESTAMP_TYPE,
    command_line,
    int64_array,
    log_values,
    machine_info,
    median,
    quiet_logs,
    random_values,
)
from benchdata import write_results as save

from plateau_core import BackpressureError, RollPolicy, Store, WriterPolicy
from plateau_core.policies import MiB
from plateau_spark.replication import IcebergReplicator, Replicator, Target

TOPIC = "widen"
EXTRA_ROWS = 1_000


def rows_batch(
    rng: random.Random,
    first: int,
    rows: int,
    latency: pa.DataType,
    partition: int,
    values: str = "random",
) -> pa.RecordBatch:
    offsets = int64_array(range(first, first + rows), rows)
    stamps = int64_array(range(BASE_MS + first, BASE_MS + first + rows), rows)
    latencies = pa.array([(o * 7 + partition) % 5_000 for o in range(first, first + rows)])
    return pa.RecordBatch.from_arrays(
        [
            offsets,
            stamps.cast(TIMESTAMP_TYPE),
            random_values(rng, rows, 128) if values == "random" else log_values(rng, rows),
            latencies.cast(latency) if latency == pa.int64() else pa.compute.add(latencies, 0.5),
        ],
        names=["offset", "timestamp", "value", "latency"],
    )


def append(store: Store, partition: int, batches: list[pa.RecordBatch], segment_rows: int) -> None:
    writer = store.writer(WriterPolicy())
    roll = RollPolicy(max_rows=segment_rows, max_bytes=1024 * MiB, max_age_s=3600.0)
    writer.acquire(TOPIC, partition, roll=roll)
    for batch in batches:
        while True:
            try:
                writer.append(TOPIC, partition, batch)
                break
            except BackpressureError:
                time.sleep(0.001)
    writer.close(timeout_s=600)


def build(args: argparse.Namespace, data_dir: Path) -> None:
    rng = random.Random(42)
    per_partition = args.rows // args.partitions
    with Store.open(data_dir) as store:
        for partition in range(args.partitions):
            batches = [
                rows_batch(rng, first, args.segment_rows, pa.int64(), partition, args.values)
                for first in range(0, per_partition, args.segment_rows)
            ]
            append(store, partition, batches, args.segment_rows)


def replicator(kind: str, store: Store, target: Path, file_bytes: int) -> Replicator:
    if kind == "iceberg":
        return IcebergReplicator(store, Target.parse(str(target)), file_bytes=file_bytes)
    return Replicator(store, Target.parse(str(target)), file_bytes=file_bytes)


def tree_bytes(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*.parquet") if "metadata" not in p.parts]
    return len(files), sum(p.stat().st_size for p in files)


def measure(kind: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Replicate the built store, keep it as the pristine state, then time the two runs."""
    live_store, live_target = work / "store", work / "target"
    pristine_store, pristine_target = work / "pristine-store", work / "pristine-target"
    for path in (live_store, live_target, pristine_store, pristine_target):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(work / "built", live_store)
    file_bytes = args.file_mb * MiB
    with Store.open(live_store) as store:
        first = replicator(kind, store, live_target, file_bytes).run_once()
    files, nbytes = tree_bytes(live_target)
    print(f"{kind}: replica of {files} files, {nbytes / MB:.0f} MB in {first.seconds:.2f} s")
    # The Iceberg catalog and table metadata name absolute paths: runs restore both folders
    # in place rather than working on copies elsewhere.
    shutil.copytree(live_store, pristine_store)
    shutil.copytree(live_target, pristine_target)
    timings: dict[str, list[float]] = {"control": [], "widened": []}
    migrated: list[int] = []
    rng = random.Random(7)
    for _ in range(args.repeat):
        for case, latency in (("control", pa.int64()), ("widened", pa.float64())):
            for live, pristine in ((live_store, pristine_store), (live_target, pristine_target)):
                shutil.rmtree(live)
                shutil.copytree(pristine, live)
            start = args.rows // args.partitions
            with Store.open(live_store) as store:
                extra = rows_batch(rng, start, EXTRA_ROWS, latency, 0, args.values)
                append(store, 0, [extra], EXTRA_ROWS)
                report = replicator(kind, store, live_target, file_bytes).run_once()
            if report.segments != 1:
                raise SystemExit(f"{kind} {case}: replicated {report.segments} segments, not 1")
            timings[case].append(report.seconds)
            if case == "widened":
                migrated.append(report.files_migrated)
    control, widened = median(timings["control"]), median(timings["widened"])
    result = {
        "replicate_seconds": first.seconds,
        "replica_files": files,
        "replica_bytes": nbytes,
        "files_migrated": migrated,
        "control_seconds_all": timings["control"],
        "widened_seconds_all": timings["widened"],
        "control_seconds_median": control,
        "widened_seconds_median": widened,
        "migration_seconds": widened - control,
        "migration_mb_per_s": nbytes / MB / (widened - control) if widened > control else None,
    }
    print(
        f"{kind}: run with the widening {widened:.2f} s, without {control:.2f} s: "
        f"{files} files ({nbytes / MB:.0f} MB) migrated in {widened - control:.2f} s"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-rows", type=int, default=100_000)
    parser.add_argument("--file-mb", type=int, default=128, help="replication.file_size, MiB")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the median counts")
    parser.add_argument(
        "--values", choices=("random", "log"), default="random", help="random bytes or log lines"
    )
    args = parser.parse_args()
    if args.rows % (args.partitions * args.segment_rows):
        parser.error("--rows must be a multiple of --partitions times --segment-rows")
    quiet_logs()
    work = Path(tempfile.mkdtemp(prefix="plateau-widen-"))
    try:
        started = time.perf_counter()
        build(args, work / "built")
        print(f"store of {args.rows} rows built in {time.perf_counter() - started:.1f} s")
        results = {kind: measure(kind, args, work) for kind in ("parquet", "iceberg")}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload = {
        "benchmark": "widen",
        "command": command_line(),
        "machine": {**machine_info(Path(tempfile.gettempdir())), "work_dir": "<tmp>"},
        "settings": vars(args),
        "results": results,
    }
    print(f"\nresults: {save('widen', payload)}")


if __name__ == "__main__":
    main()
