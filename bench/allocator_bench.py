"""serve with its malloc tuned (bridge/allocators.py) against the same serve with glibc's
defaults, alternating, on one machine. Three kinds of serve:

  defaults  the tuning taken out: glibc's adjusting mmap and trim thresholds
  tuned     serve as it is
  jemalloc  serve as it is, with pyarrow's calls allocating from Arrow's jemalloc pool
            (pyarrow.set_memory_pool) instead of its default (mimalloc): the variant not
            taken

For each client case, rounds of: a fresh serve of each kind (the produce-only config of
bench/produce_bench.py), warmed with 200,000 records, then a fixed number of records timed.
The consumer path (`--consume N`, 0 to leave it out): the local Apache Kafka broker, a topic
of N records of 128 bytes and one of N / 1,000 Arrow IPC messages of 1,000 rows (the
ingest bench's), each in 8 partitions and filled once, then per round a fresh serve of each
kind landing each topic (`format: raw`, `format: arrow`, one worker), timed from its start
until every record (row) is in the manifest.
Reported per case and kind: records/s acknowledged (or landed), serve's CPU per record (us)
and serve's peak RSS (MB); medians of the rounds, ratios tuned / defaults.

`--long-lived N`: instead, one serve of each kind (defaults, tuned) kept for N runs of 1M
records of 1 KiB (the perf test's defaults), each run's figures printed: whether a serve's
cost drifts as it ages. With `--mixed`, each run is followed by 1M records of 1 KiB from
librdkafka (1 MiB batches) into the same serve.

    .venv/bin/python bench/allocator_bench.py --rounds 3 --consume 3000000
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchdata import write_results
from ingest_bench import (
    BenchError,
    arrow_values,
    broker,
    prefill,
    proc_stat,
    raw_values,
)
from produce_bench import (
    free_port,
    librdkafka,
    listener_config,
    perf_test,
    stored_records,
    wait_port,
)
from produce_bench import start_serve as produce_serve

KINDS = ("defaults", "tuned", "jemalloc")
# (client, record size, records timed)
CASES = (
    ("perf test", 128, 1_500_000),
    ("perf test", 1024, 600_000),
    ("librdkafka", 1024, 1_000_000),
)
WARM = 200_000
LONG_RECORDS = 1_000_000  # per run of --long-lived
ARROW_ROWS = 1_000  # per Arrow IPC message of the consumer path's arrow topic
Run = dict[str, float]
# serve, with the malloc tuning taken out (defaults) or Arrow's jemalloc pool set (jemalloc).
_SERVE = """
import sys
kind = sys.argv.pop(1)
if kind == "defaults":
    import bridge.serve
    bridge.serve.tune_allocators = lambda: None
elif kind == "jemalloc":
    import pyarrow
    pyarrow.set_memory_pool(pyarrow.jemalloc_memory_pool())
from bridge.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _send(client: str, bootstrap: str, topic: str, records: int, size: int) -> float:
    if client == "librdkafka":
        acked, seconds = librdkafka(bootstrap, topic, records, size)
        return acked / seconds
    return perf_test(bootstrap, topic, records, size)["rate"]


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise BenchError(f"no VmHWM for {pid}")


def start_serve(
    work: Path, kind: str, name: str, config: dict[str, Any]
) -> subprocess.Popen[bytes]:
    """serve of `kind` (see the module's doc)."""
    return produce_serve(config, work, name, launcher=("-c", _SERVE, kind))


def _stop(serve: subprocess.Popen[bytes]) -> None:
    serve.terminate()
    serve.wait(timeout=120)


def _figures(records_per_s: float, cpu_s: float, records: int, pid: int) -> Run:
    return {
        "records_per_s": records_per_s,
        "cpu_us_per_record": cpu_s * 1e6 / records,
        "peak_rss_mb": _peak_rss_mb(pid),
    }


def _timed(
    serve: subprocess.Popen[bytes], kind: str, client: str, bootstrap: str, records: int, size: int
) -> Run:
    """`records` sent by `client` into a warm serve: its rate, and serve's CPU meanwhile."""
    before = proc_stat(serve.pid)
    rate = _send(client, bootstrap, "timed", records, size)
    after = proc_stat(serve.pid)
    if before is None or after is None:
        raise BenchError(f"serve ({kind}) ended during the run")
    return _figures(rate, after.cpu_s - before.cpu_s, records, serve.pid)


def one(work: Path, kind: str, client: str, size: int, records: int) -> Run:
    port = free_port()
    name = f"{kind}-{client.replace(' ', '-')}-{size}-{time.monotonic_ns()}"
    serve = start_serve(work, kind, name, listener_config(port, work / f"{name}-store"))
    try:
        wait_port(port)
        bootstrap = f"127.0.0.1:{port}"
        _send(client, bootstrap, "warm", WARM, size)
        return _timed(serve, kind, client, bootstrap, records, size)
    finally:
        _stop(serve)


def landed(work: Path, kind: str, bootstrap: str, topic: str, fmt: str, records: int) -> Run:
    """serve of `kind` landing the prefilled `topic` from its start: records/s and CPU."""
    name = f"{kind}-consume-{time.monotonic_ns()}"
    data_dir = work / f"{name}-store"
    config = {
        "kafka": {"bootstrap_servers": bootstrap, "group_id": name},
        "storage": {"data_dir": str(data_dir)},
        "defaults": {"roll": {"max_age": "1s"}},
        "topics": [{"source": topic, "format": fmt}],
        "metrics": {"enabled": False},
    }
    started = time.monotonic()
    serve = start_serve(work, kind, name, config)
    try:
        deadline = started + 600
        while stored_records(data_dir, topic) < records:
            if serve.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"serve ({kind}) did not land {records} records")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        stat = proc_stat(serve.pid)
        if stat is None:
            raise BenchError(f"serve ({kind}) ended during the run")
        return _figures(records / elapsed, stat.cpu_s, records, serve.pid)
    finally:
        _stop(serve)


def consume_cases(work: Path, records: int, rounds: int) -> dict[str, dict[str, list[Run]]]:
    found: dict[str, dict[str, list[Run]]] = {}
    with broker(work, "1g") as kafka:
        bootstrap = kafka.bootstrap_servers
        messages = records // ARROW_ROWS
        topics = [
            (
                "consumed, 128 B",
                prefill(bootstrap, "landed", 8, raw_values(records, 128), 1),
                "raw",
            ),
            (
                "consumed, arrow",
                prefill(bootstrap, "arrows", 8, arrow_values(messages, ARROW_ROWS), ARROW_ROWS),
                "arrow",
            ),
        ]
        for case, topic, fmt in topics:
            found[case] = {kind: [] for kind in KINDS}
            for _ in range(rounds):
                for kind in KINDS:
                    run = landed(work, kind, bootstrap, topic.name, fmt, topic.rows)
                    found[case][kind].append(run)
                    print(case, kind, run, flush=True)
    return found


def long_lived(work: Path, rounds: int, mixed: bool) -> dict[str, list[Run]]:
    clients = ("perf test", "librdkafka") if mixed else ("perf test",)
    found: dict[str, list[Run]] = {
        f"{kind}, {client}": [] for kind in ("defaults", "tuned") for client in clients
    }
    for kind in ("defaults", "tuned"):
        port = free_port()
        serve = start_serve(work, kind, f"{kind}-long", listener_config(port, work / kind))
        try:
            wait_port(port)
            bootstrap = f"127.0.0.1:{port}"
            for client in clients:
                _send(client, bootstrap, "warm", WARM, 1024)
            for _ in range(rounds):
                for client in clients:
                    run = _timed(serve, kind, client, bootstrap, LONG_RECORDS, 1024)
                    found[f"{kind}, {client}"].append(run)
                    print("long-lived, 1024 B", kind, client, run, flush=True)
        finally:
            _stop(serve)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--consume", type=int, default=3_000_000, help="0: no consumer case")
    parser.add_argument("--produce", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--long-lived", type=int, default=0, metavar="N", help="see the doc")
    parser.add_argument("--mixed", action="store_true", help="with --long-lived: see the doc")
    args = parser.parse_args(argv)
    if args.long_lived:
        try:
            with tempfile.TemporaryDirectory(prefix="plateau-allocators-") as tmp:
                long = long_lived(Path(tmp), args.long_lived, args.mixed)
        except BenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {write_results('allocators-long', {'runs': long})}")
        return 0
    runs: dict[str, dict[str, list[Run]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="plateau-allocators-") as tmp:
            if args.consume:
                runs.update(consume_cases(Path(tmp), args.consume, args.rounds))
            for client, size, records in CASES if args.produce else ():
                case = f"{client}, {size} B"
                runs[case] = {kind: [] for kind in KINDS}
                for _ in range(args.rounds):
                    for kind in KINDS:
                        found = one(Path(tmp), kind, client, size, records)
                        runs[case][kind].append(found)
                        print(case, kind, found, flush=True)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    summary: dict[str, dict[str, float]] = {}
    for case, kinds in runs.items():
        row = {
            f"{kind} {metric}": statistics.median(r[metric] for r in kinds[kind])
            for kind in KINDS
            for metric in ("records_per_s", "cpu_us_per_record", "peak_rss_mb")
        }
        row["records/s ratio"] = row["tuned records_per_s"] / row["defaults records_per_s"]
        row["cpu ratio"] = row["tuned cpu_us_per_record"] / row["defaults cpu_us_per_record"]
        summary[case] = row
        print(
            f"{case:22s} {row['defaults records_per_s']:9,.0f}/s -> "
            f"{row['tuned records_per_s']:9,.0f}/s ({row['records/s ratio']:.2f}x), "
            f"cpu {row['defaults cpu_us_per_record']:.2f} -> "
            f"{row['tuned cpu_us_per_record']:.2f} us ({row['cpu ratio']:.2f}x), "
            f"peak RSS {row['defaults peak_rss_mb']:.0f} -> {row['tuned peak_rss_mb']:.0f} MB"
        )
    body = {"cases": CASES, "consume": args.consume, "runs": runs, "summary": summary}
    print(f"wrote {write_results('allocators', body)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
