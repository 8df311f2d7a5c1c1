"""serve with its allocators tuned (bridge/allocators.py) against the same serve with the
defaults, alternating, on one machine. Three kinds of serve:

  defaults  the tuning taken out: Arrow's mimalloc pool, glibc's adjusting thresholds
  tuned     serve as it is
  env       serve as it is, with ARROW_DEFAULT_MEMORY_POOL=jemalloc set before pyarrow is
            imported, so that Arrow's own C++ allocations use jemalloc too (the tuning sets
            the pool of pyarrow's calls only)

For each client case, rounds of: a fresh serve of each kind (the produce-only config of
bench/produce_bench.py), warmed with 200,000 records, then a fixed number of records timed.
Reported per case and kind: records/s acknowledged, serve's CPU per record (us) and serve's
peak RSS (MB); medians of the rounds, ratios tuned / defaults.

    .venv/bin/python bench/allocator_bench.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ingest_bench import PYTHON, REPO, RESULTS_DIR, BenchError, proc_stat
from produce_bench import free_port, librdkafka, listener_config, perf_test, wait_port

KINDS = ("defaults", "tuned", "env")
# (client, record size, records timed)
CASES = (
    ("perf test", 128, 1_500_000),
    ("perf test", 1024, 600_000),
    ("librdkafka", 1024, 1_000_000),
)
WARM = 200_000
# serve, with the allocator tuning taken out for the defaults, Arrow's C++ pool set for env.
_SERVE = """
import os, sys
if sys.argv[1] == "env":
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"
if sys.argv.pop(1) == "defaults":
    import bridge.serve
    bridge.serve.tune_allocators = lambda: None
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


def one(work: Path, kind: str, client: str, size: int, records: int) -> dict[str, float]:
    port = free_port()
    name = f"{kind}-{client.replace(' ', '-')}-{size}-{time.monotonic_ns()}"
    path = work / f"{name}.json"
    path.write_text(json.dumps(listener_config(port, work / f"{name}-store")))
    with (work / f"{name}.log").open("wb") as log:
        serve = subprocess.Popen(
            [PYTHON, "-c", _SERVE, kind, "--log-level", "WARNING", "serve", "--config", str(path)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_port(port)
        bootstrap = f"127.0.0.1:{port}"
        _send(client, bootstrap, "warm", WARM, size)
        before = proc_stat(serve.pid)
        rate = _send(client, bootstrap, "timed", records, size)
        after = proc_stat(serve.pid)
        if before is None or after is None:
            raise BenchError(f"serve ({kind}) ended during the run")
        rss = _peak_rss_mb(serve.pid)
    finally:
        serve.terminate()
        serve.wait(timeout=120)
    return {
        "records_per_s": rate,
        "cpu_us_per_record": (after.cpu_s - before.cpu_s) * 1e6 / records,
        "peak_rss_mb": rss,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    runs: dict[str, dict[str, list[dict[str, float]]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="plateau-allocators-") as tmp:
            for client, size, records in CASES:
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
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = RESULTS_DIR / f"allocators-{stamp}.json"
    out.write_text(json.dumps({"cases": CASES, "runs": runs, "summary": summary}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
