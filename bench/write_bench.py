"""Write throughput of plateau's Writer against plain Arrow IPC file writes of the same batches.

For every (value kind, compression) pair the script runs two cases, each in its own
subprocess so that its peak RSS is its own:

- plateau: Store.open(tmp).writer(WriterPolicy(...)); acquire every partition; append every
  batch (on BackpressureError wait until `accepting()` and retry the same batch); flush; close;
  then check that the manifest holds every row as sealed segments.
- limit: the same batches grouped per partition exactly as the roll policy would cut them,
  each group written with pyarrow.ipc.new_file (same compression) and fsynced, on a thread
  pool as large as the writer's.

Batches are generated before the clock starts. Results go to bench/results/write-<ts>.json.

    .venv/bin/python bench/write_bench.py                       # 10M rows, lz4, random values
    .venv/bin/python bench/write_bench.py --rows 2000000 --compression all --values all
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
from benchdata import (
    MB,
    VALUE_KINDS,
    Workload,
    build_workload,
    command_line,
    directory_bytes,
    fresh_copy,
    machine_info,
    median,
    peak_rss_bytes,
    quiet_logs,
    write_results,
)
from pyarrow import ipc

from plateau_core import (
    BackpressureError,
    MiB,
    NoListener,
    RollPolicy,
    SealedSegment,
    Store,
    WriterPolicy,
)
from plateau_core.policies import COMPRESSIONS

TOPIC = "bench"
CASES = ("limit", "plateau")
TARGET_RATIO = 0.8
RSS_HEADROOM = 200 * MB


# --- one case, in a child process ------------------------------------------------------------


class SealCounter(NoListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.segments: list[SealedSegment] = []
        self.failures: list[str] = []

    def on_sealed(self, segment: SealedSegment) -> None:
        with self.lock:
            self.segments.append(segment)

    def on_seal_failed(self, topic: str, partition: int, error: Exception) -> None:
        with self.lock:
            self.failures.append(f"{topic}[{partition}]: {error}")


def run_plateau(args: argparse.Namespace, work: Workload, root: Path) -> dict[str, Any]:
    store = Store.open(root)
    policy = WriterPolicy(
        memory_budget_bytes=args.memory_budget_mib * MiB,
        writer_threads=args.writer_threads,
        compression=args.compression,
    )
    roll = RollPolicy(
        max_rows=args.segment_rows, max_bytes=args.segment_mib * MiB, max_age_s=args.max_age_s
    )
    listener = SealCounter()
    writer = store.writer(policy, listener)
    for partition in range(args.partitions):
        writer.acquire(TOPIC, partition, roll=roll)
    refusals: Counter[str] = Counter()
    waited = 0.0
    started = time.perf_counter()
    for partition, batch in work.batches:
        data = fresh_copy(batch) if args.fresh_values else batch
        while True:
            try:
                writer.append(TOPIC, partition, data)
                break
            except BackpressureError as exc:
                refusals[exc.reason] += 1
                paused = time.perf_counter()
                time.sleep(0.001)
                while not writer.accepting(TOPIC, partition):
                    time.sleep(0.001)
                waited += time.perf_counter() - paused
    appended = time.perf_counter()
    writer.flush(timeout_s=600)
    writer.close(timeout_s=600)
    seconds = time.perf_counter() - started

    spans = store.spans(TOPIC)
    records = sum(s.records for s in spans)
    expected = dict(enumerate(work.rows_per_partition))
    watermarks = {s.partition: s.next_offset for s in spans}
    sealed_ok = records == work.rows and watermarks == expected and not listener.failures
    if not sealed_ok:
        raise SystemExit(
            f"not everything was sealed: manifest holds {records} of {work.rows} rows, "
            f"watermarks {watermarks}, expected {expected}, failures {listener.failures}"
        )
    segment_bytes = sum(s.bytes for s in spans)
    apparent, allocated = directory_bytes(root)
    seal_seconds = [s.seconds for s in listener.segments]
    store.close()
    return {
        "seconds": seconds,
        "append_seconds": appended - started,
        "files": sum(s.segments for s in spans),
        "file_bytes": segment_bytes,
        "dir_apparent_bytes": apparent,
        "dir_allocated_bytes": allocated,
        "manifest_records": records,
        "sealed_ok": sealed_ok,
        "backpressure_refusals": dict(refusals),
        "backpressure_wait_seconds": waited,
        "seal_seconds_mean": sum(seal_seconds) / len(seal_seconds),
        "seal_seconds_max": max(seal_seconds),
        "segment_rows_mean": records / len(seal_seconds),
    }


def write_file(path: Path, table: pa.Table, options: ipc.IpcWriteOptions) -> int:
    with pa.OSFile(str(path), "wb") as sink:
        with ipc.new_file(sink, table.schema, options=options) as file_writer:
            file_writer.write_table(table)
        sink.flush()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path.stat().st_size


def run_limit(args: argparse.Namespace, work: Workload, root: Path) -> dict[str, Any]:
    """Plain IPC files of the same groups the roll policy makes, on an equal thread pool."""
    codec = None if args.compression == "none" else args.compression
    options = ipc.IpcWriteOptions(compression=codec)
    max_bytes = args.segment_mib * MiB
    for partition in range(args.partitions):
        (root / str(partition)).mkdir(parents=True)
    pending: dict[int, list[pa.RecordBatch]] = {p: [] for p in range(args.partitions)}
    pending_rows = dict.fromkeys(pending, 0)
    pending_bytes = dict.fromkeys(pending, 0)
    # Bound the groups queued for the pool, as the writer's memory budget bounds its own.
    slots = threading.BoundedSemaphore(args.writer_threads * 2)
    futures: list[Future[int]] = []
    pool = ThreadPoolExecutor(args.writer_threads)

    def submit(partition: int) -> None:
        batches = pending[partition]
        first = batches[0].column(0)[0].as_py()
        path = root / str(partition) / f"{first:020d}.arrow"
        slots.acquire()
        future = pool.submit(write_file, path, pa.Table.from_batches(batches), options)
        future.add_done_callback(lambda _f: slots.release())
        futures.append(future)
        pending[partition], pending_rows[partition], pending_bytes[partition] = [], 0, 0

    started = time.perf_counter()
    for partition, batch in work.batches:
        data = fresh_copy(batch) if args.fresh_values else batch
        pending[partition].append(data)
        pending_rows[partition] += data.num_rows
        pending_bytes[partition] += data.nbytes
        if pending_rows[partition] >= args.segment_rows or pending_bytes[partition] >= max_bytes:
            submit(partition)
    appended = time.perf_counter()
    for partition, batches in pending.items():
        if batches:
            submit(partition)
    pool.shutdown(wait=True)
    sizes = [f.result() for f in futures]
    seconds = time.perf_counter() - started
    apparent, allocated = directory_bytes(root)
    return {
        "seconds": seconds,
        "append_seconds": appended - started,
        "files": len(sizes),
        "file_bytes": sum(sizes),
        "dir_apparent_bytes": apparent,
        "dir_allocated_bytes": allocated,
        "segment_rows_mean": work.rows / len(sizes),
    }


def run_case(args: argparse.Namespace) -> None:
    quiet_logs()
    work = build_workload(
        rows=args.rows,
        batch_rows=args.batch_rows,
        partitions=args.partitions,
        value_kind=args.values,
        value_size=args.value_size,
    )
    rss_ready = peak_rss_bytes()
    root = Path(tempfile.mkdtemp(prefix=f"plateau-write-{args.case}-", dir=args.work_dir))
    try:
        runner = run_plateau if args.case == "plateau" else run_limit
        result = runner(args, work, root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    seconds = result["seconds"]
    result.update(
        {
            "case": args.case,
            "compression": args.compression,
            "values": args.values,
            "rows": work.rows,
            "arrow_bytes": work.arrow_bytes,
            "value_bytes": work.value_bytes,
            "rows_per_s": work.rows / seconds,
            "arrow_mb_per_s": work.arrow_bytes / seconds / MB,
            "value_mb_per_s": work.value_bytes / seconds / MB,
            "compression_ratio": work.arrow_bytes / result["file_bytes"],
            "generated_bytes": work.generated_bytes,
            "peak_rss_before_write_bytes": rss_ready,
            "peak_rss_bytes": peak_rss_bytes(),
        }
    )
    Path(args.case_output).write_text(json.dumps(result))


# --- the driver ------------------------------------------------------------------------------


def child_command(args: argparse.Namespace, case: str, values: str, compression: str) -> list[str]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--case",
        case,
        "--values",
        values,
        "--compression",
        compression,
        "--rows",
        str(args.rows),
        "--batch-rows",
        str(args.batch_rows),
        "--partitions",
        str(args.partitions),
        "--value-size",
        str(args.value_size),
        "--memory-budget-mib",
        str(args.memory_budget_mib),
        "--writer-threads",
        str(args.writer_threads),
        "--segment-rows",
        str(args.segment_rows),
        "--segment-mib",
        str(args.segment_mib),
        "--max-age-s",
        str(args.max_age_s),
    ]
    if args.work_dir:
        command += ["--work-dir", args.work_dir]
    if args.fresh_values:
        command.append("--fresh-values")
    if args.keep:
        command.append("--keep")
    return command


def run_child(command: list[str]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        output = Path(handle.name)
    try:
        subprocess.run([*command, "--case-output", str(output)], check=True)
        result: dict[str, Any] = json.loads(output.read_text())
        return result
    finally:
        output.unlink(missing_ok=True)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median wall time, plus the spread and the worst peak RSS."""
    seconds = [r["seconds"] for r in runs]
    middle = median(seconds)
    chosen = min(runs, key=lambda r: abs(r["seconds"] - middle))
    return {
        **chosen,
        "seconds_median": middle,
        "seconds_all": seconds,
        "rows_per_s": chosen["rows"] / middle,
        "arrow_mb_per_s": chosen["arrow_bytes"] / middle / MB,
        "value_mb_per_s": chosen["value_bytes"] / middle / MB,
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in runs),
    }


def choices(text: str, allowed: tuple[str, ...]) -> list[str]:
    picked = list(allowed) if text == "all" else text.split(",")
    unknown = [p for p in picked if p not in allowed]
    if unknown:
        raise SystemExit(f"unknown choice(s) {unknown}; pick from {', '.join(allowed)} or all")
    return picked


def drive(args: argparse.Namespace) -> None:
    work_dir = Path(args.work_dir or tempfile.gettempdir())
    combos = [
        (values, compression)
        for values in choices(args.values, VALUE_KINDS)
        for compression in choices(args.compression, COMPRESSIONS)
    ]
    budget = args.memory_budget_mib * MiB
    results: list[dict[str, Any]] = []
    for values, compression in combos:
        runs: dict[str, list[dict[str, Any]]] = {case: [] for case in CASES}
        for repeat in range(args.repeat):
            # Alternate the order so drift on a noisy machine hits both cases alike.
            order = CASES if repeat % 2 == 0 else tuple(reversed(CASES))
            for case in order:
                run = run_child(child_command(args, case, values, compression))
                runs[case].append(run)
                print(
                    f"{values:>6} {compression:>4} {case:>7} #{repeat + 1}: "
                    f"{run['seconds']:6.2f} s  {run['rows_per_s'] / 1e6:5.2f} M rows/s  "
                    f"{run['arrow_mb_per_s']:6.1f} MB/s  rss {run['peak_rss_bytes'] / MB:6.0f} MB",
                    flush=True,
                )
        limit, plateau = summarize(runs["limit"]), summarize(runs["plateau"])
        ratio = plateau["rows_per_s"] / limit["rows_per_s"]
        rss_limit = budget + RSS_HEADROOM
        results.append(
            {
                "values": values,
                "compression": compression,
                "limit": limit,
                "plateau": plateau,
                "runs": runs,
                "ratio": ratio,
                "ratio_target": TARGET_RATIO,
                "ratio_ok": ratio >= TARGET_RATIO,
                "rss_limit_bytes": rss_limit,
                "rss_ok": plateau["peak_rss_bytes"] <= rss_limit,
            }
        )
    payload = {
        "benchmark": "write",
        "command": command_line(),
        "machine": machine_info(work_dir),
        "settings": {
            "rows": args.rows,
            "batch_rows": args.batch_rows,
            "partitions": args.partitions,
            "value_size": args.value_size,
            "memory_budget_bytes": budget,
            "writer_threads": args.writer_threads,
            "segment_rows": args.segment_rows,
            "segment_bytes": args.segment_mib * MiB,
            "max_age_s": args.max_age_s,
            "fresh_values": args.fresh_values,
            "repeat": args.repeat,
            "mb": "10^6 bytes; arrow_mb_per_s counts all four columns' Arrow buffers "
            "(offset, timestamp, key and value incl. their offset buffers), value_mb_per_s "
            "only the value payload bytes",
        },
        "results": results,
    }
    path = write_results("write", payload)
    print()
    header = (
        f"{'values':>6} {'comp':>4} {'plateau s':>9} {'rows/s':>11} {'MB/s':>7} "
        f"{'limit s':>8} {'rows/s':>11} {'ratio':>6} {'on disk MB':>10} {'x':>5} {'RSS MB':>7}"
    )
    print(header)
    for r in results:
        p, lim = r["plateau"], r["limit"]
        print(
            f"{r['values']:>6} {r['compression']:>4} {p['seconds_median']:>9.2f} "
            f"{p['rows_per_s']:>11,.0f} {p['arrow_mb_per_s']:>7.1f} {lim['seconds_median']:>8.2f} "
            f"{lim['rows_per_s']:>11,.0f} {r['ratio']:>6.2f} {p['file_bytes'] / MB:>10.1f} "
            f"{p['compression_ratio']:>5.2f} {p['peak_rss_bytes'] / MB:>7.0f}"
            + ("" if r["ratio_ok"] else "  ratio below target")
            + ("" if r["rss_ok"] else "  RSS over budget+200MB")
        )
    print(f"\nresults: {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    roll, policy = RollPolicy(), WriterPolicy()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batch-rows", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-size", type=int, default=128, help="bytes per random value")
    parser.add_argument(
        "--values", default="random", help=f"{', '.join(VALUE_KINDS)}, a comma list, or all"
    )
    parser.add_argument(
        "--compression",
        default=policy.compression,
        help=f"{', '.join(COMPRESSIONS)}, a comma list, or all",
    )
    parser.add_argument("--memory-budget-mib", type=int, default=policy.memory_budget_bytes // MiB)
    parser.add_argument("--writer-threads", type=int, default=policy.writer_threads)
    parser.add_argument("--segment-rows", type=int, default=roll.max_rows)
    parser.add_argument("--segment-mib", type=int, default=roll.max_bytes // MiB)
    parser.add_argument("--max-age-s", type=float, default=roll.max_age_s)
    parser.add_argument("--repeat", type=int, default=5, help="runs per case; the median counts")
    parser.add_argument(
        "--fresh-values",
        action="store_true",
        help="copy each batch's values just before appending (timed, both cases), so the "
        "buffered data is real memory as in a consumer instead of shared pool arrays",
    )
    parser.add_argument("--work-dir", help="where the temporary stores go (default: $TMPDIR)")
    parser.add_argument("--keep", action="store_true", help="keep the written files")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--case-output", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.case:
        run_case(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
