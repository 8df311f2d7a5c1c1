"""Read speed of plateau: a full scan against a time-range read of 1% of the data.

Builds (or reuses, with --data-dir) a store of ~10M rows over 8 partitions whose timestamps
rise evenly over a time span in every partition, cut into ~100 segments, then in the same run
times, after one untimed warm-up scan (so both read from the page cache):

- full: every batch of store.read(topic);
- range: every batch of store.read(topic, time_start=..., time_end=...) for a window of
  `--fraction` of the span centred in the span (with the defaults it falls inside one
  segment per partition);
- range-boundary: the same width centred on a segment boundary (two segments per partition).

Results go to bench/results/read-<ts>.json.

    .venv/bin/python bench/read_bench.py
    .venv/bin/python bench/read_bench.py --data-dir /var/tmp/plateau-read   # build once, reuse
"""

from __future__ import annotations

import argparse
import bisect
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchdata import (
    BASE_MS,
    MB,
    VALUE_KINDS,
    build_workload,
    command_line,
    machine_info,
    median,
    peak_rss_bytes,
    quiet_logs,
    write_results,
)

from plateau_core import BackpressureError, MiB, RollPolicy, Store, WriterPolicy
from plateau_core.policies import COMPRESSIONS

TOPIC = "bench"
SETTINGS_FILE = "read-bench.json"
TARGET_SPEEDUP = 20.0


def build_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "rows": args.rows,
        "batch_rows": args.batch_rows,
        "partitions": args.partitions,
        "segment_rows": args.segment_rows,
        "span_ms": args.span_hours * 3_600_000,
        "compression": args.compression,
        "values": args.values,
    }


def build_store(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    settings = build_settings(args)
    work = build_workload(
        rows=args.rows,
        batch_rows=args.batch_rows,
        partitions=args.partitions,
        value_kind=args.values,
        span_ms=settings["span_ms"],
    )
    started = time.perf_counter()
    with Store.open(data_dir) as store:
        writer = store.writer(WriterPolicy(compression=args.compression))
        # Only the row count cuts segments: bytes and age limits are out of reach here.
        roll = RollPolicy(max_rows=args.segment_rows, max_bytes=1024 * MiB, max_age_s=3600.0)
        for partition in range(args.partitions):
            writer.acquire(TOPIC, partition, roll=roll)
        for partition, batch in work.batches:
            while True:
                try:
                    writer.append(TOPIC, partition, batch)
                    break
                except BackpressureError:
                    time.sleep(0.001)
                    while not writer.accepting(TOPIC, partition):
                        time.sleep(0.001)
        writer.close(timeout_s=600)
        records = sum(s.records for s in store.spans(TOPIC))
    if records != work.rows:
        raise SystemExit(f"build sealed {records} of {work.rows} rows")
    (data_dir / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
    return {"build_seconds": time.perf_counter() - started, "rows_written": work.rows}


def ensure_store(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    """Build the store unless `data_dir` already holds one made with the same settings."""
    marker = data_dir / SETTINGS_FILE
    if marker.exists():
        found = json.loads(marker.read_text())
        if found != build_settings(args):
            raise SystemExit(
                f"{data_dir} holds a store built with {found}; these settings need "
                f"{build_settings(args)}: pass another --data-dir"
            )
        return {"reused": True}
    if data_dir.exists() and any(data_dir.iterdir()):
        raise SystemExit(f"{data_dir} is not empty and holds no {SETTINGS_FILE}")
    return {"reused": False, **build_store(args, data_dir)}


def timed_read(
    store: Store, time_start: int | None = None, time_end: int | None = None
) -> dict[str, Any]:
    started = time.perf_counter()
    result = store.read(TOPIC, time_start=time_start, time_end=time_end)
    rows = nbytes = 0
    for batch in result:
        rows += batch.num_rows
        nbytes += batch.nbytes
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "rows": rows,
        "arrow_bytes": nbytes,
        "segments_planned": len(result.segments),
        "segments_opened": len(result.opened),
        "rows_in_opened_segments": sum(s.record_count for s in result.segments),
    }


def expected_rows(settings: dict[str, Any], rows_per_partition: int, start: int, end: int) -> int:
    """Rows whose timestamp is in [start, end): they rise as BASE_MS + o * span // n."""
    span: int = settings["span_ms"]
    n = rows_per_partition

    def stamp(o: int) -> int:
        return BASE_MS + o * span // n

    first = bisect.bisect_left(range(n), start, key=stamp)
    last = bisect.bisect_left(range(n), end, key=stamp)
    partitions: int = settings["partitions"]
    return (last - first) * partitions


def windows(store: Store, settings: dict[str, Any], fraction: float) -> dict[str, tuple[int, int]]:
    span = settings["span_ms"]
    width = max(1, round(span * fraction))
    middle = BASE_MS + span // 2
    # A segment boundary near the middle: where partition 0's next segment starts.
    starts = sorted(s.time_min for s in store.manifest.segments(TOPIC, partitions=[0]))
    boundary = starts[min(bisect.bisect_right(starts, middle), len(starts) - 1)]
    return {
        "range": (middle - width // 2, middle - width // 2 + width),
        "range-boundary": (boundary - width // 2, boundary - width // 2 + width),
    }


def measure(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    settings = build_settings(args)
    rows_per_partition = args.rows // args.partitions
    with Store.open(data_dir) as store:
        spans = store.spans(TOPIC)
        store_info = {
            "rows": sum(s.records for s in spans),
            "segments": sum(s.segments for s in spans),
            "segment_bytes": sum(s.bytes for s in spans),
        }
        bounds = windows(store, settings, args.fraction)
        warmup = timed_read(store)
        runs: dict[str, list[dict[str, Any]]] = {"full": [], **{name: [] for name in bounds}}
        for repeat in range(args.repeat):
            for name, measured in runs.items():
                run = timed_read(store, *bounds[name]) if name in bounds else timed_read(store)
                measured.append(run)
                print(
                    f"#{repeat + 1} {name:>14}: {run['seconds']:7.3f} s  {run['rows']:>10,} rows  "
                    f"{run['segments_opened']:>4} segments opened",
                    flush=True,
                )
    expected = {
        "full": store_info["rows"],
        **{
            name: expected_rows(settings, rows_per_partition, start, end)
            for name, (start, end) in bounds.items()
        },
    }
    summary: dict[str, Any] = {}
    for name, measured in runs.items():
        seconds = median([r["seconds"] for r in measured])
        last = measured[-1]
        if any(r["rows"] != expected[name] for r in measured):
            raise SystemExit(f"{name} read returned {last['rows']} rows, {expected[name]} expected")
        summary[name] = {
            "seconds_median": seconds,
            "seconds_all": [r["seconds"] for r in measured],
            "rows": last["rows"],
            "rows_per_s": last["rows"] / seconds,
            "arrow_mb_per_s": last["arrow_bytes"] / seconds / MB,
            "segments_opened": last["segments_opened"],
            "segments_planned": last["segments_planned"],
            "rows_in_opened_segments": last["rows_in_opened_segments"],
            "time_start": bounds[name][0] if name in bounds else None,
            "time_end": bounds[name][1] if name in bounds else None,
        }
    full = summary["full"]["seconds_median"]
    for name in bounds:
        speedup = full / summary[name]["seconds_median"]
        summary[name]["fraction_of_rows"] = summary[name]["rows"] / store_info["rows"]
        summary[name]["speedup"] = speedup
        summary[name]["speedup_ok"] = speedup >= TARGET_SPEEDUP
    return {"store": store_info, "warmup_seconds": warmup["seconds"], "reads": summary}


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """The store's shape (and the range width), shared with bench/query_bench.py."""
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batch-rows", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--segment-rows", type=int, default=100_000, help="roll max_rows")
    parser.add_argument("--span-hours", type=int, default=24, help="time span of the data")
    parser.add_argument("--fraction", type=float, default=0.01, help="time-range width")
    parser.add_argument("--compression", choices=COMPRESSIONS, default=WriterPolicy().compression)
    parser.add_argument("--values", choices=VALUE_KINDS, default="random")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_store_arguments(parser)
    parser.add_argument("--repeat", type=int, default=5, help="runs per read; the median counts")
    parser.add_argument(
        "--data-dir", type=Path, help="build the store here once and reuse it (default: temp)"
    )
    args = parser.parse_args()
    if args.rows % (args.batch_rows * args.partitions):
        parser.error("--rows must be a multiple of --batch-rows times --partitions")
    quiet_logs()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="plateau-read-"))
    try:
        built = ensure_store(args, data_dir.resolve())
        print(
            "store reused" if built["reused"] else f"store built in {built['build_seconds']:.1f} s"
        )
        measured = measure(args, data_dir.resolve())
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    payload = {
        "benchmark": "read",
        "command": command_line(),
        "machine": machine_info(data_dir.parent),
        "settings": {**build_settings(args), "fraction": args.fraction, "repeat": args.repeat},
        "build": built,
        **measured,
        "speedup_target": TARGET_SPEEDUP,
        "peak_rss_bytes": peak_rss_bytes(),
    }
    path = write_results("read", payload)
    print()
    full = measured["reads"]["full"]
    store = measured["store"]
    print(
        f"store: {store['rows']:,} rows in {store['segments']} segments, "
        f"{store['segment_bytes'] / MB:.0f} MB"
    )
    print(f"{'read':>14} {'seconds':>8} {'rows':>11} {'opened':>6} {'speedup':>8}")
    print(f"{'full':>14} {full['seconds_median']:8.3f} {full['rows']:>11,} {store['segments']:>6}")
    for name, read in measured["reads"].items():
        if name == "full":
            continue
        print(
            f"{name:>14} {read['seconds_median']:8.3f} {read['rows']:>11,} "
            f"{read['segments_opened']:>6} {read['speedup']:7.1f}x"
            + ("" if read["speedup_ok"] else f"  below the {TARGET_SPEEDUP:.0f}x target")
        )
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
