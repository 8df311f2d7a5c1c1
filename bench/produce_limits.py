"""What bounds the Java producer's defaults into plateau's Kafka API: the same perf test run
into `plateau serve` as configured, and into variants that take one part of serve's work
out of the run, alternating, on one machine.

  as-is     the produce-only config of bench/produce_bench.py (durability: journal)
  no-seal   nothing seals during the run (roll.max_age 120 s, roll.max_bytes 2 GiB, a
            3 GiB memory budget): the seals' share of the round
  no-sync   serve with the journal's fdatasync made a no-op (an experiment, not a
            setting: acknowledged records would not survive a power loss)
  neither   both

Each case starts its own serve and store, warms it with 20,000 records, then times the
perf test; reported per case: records/s (median of the rounds) and serve's CPU seconds.
Ratios are against as-is of the same run.

    .venv/bin/python bench/produce_limits.py --records 300000 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchdata import write_results
from ingest_bench import BenchError, proc_stat
from produce_bench import free_port, listener_config, perf_test, start_serve, wait_port

CASES = ("as-is", "no-seal", "no-sync", "neither")
# serve, with the journal's sync taken out when asked (the no-sync cases only).
_SERVE = """
import sys
if sys.argv.pop(1) == "1":
    from plateau_core import journal
    class _NoSync:
        def __getattr__(self, name):
            return getattr(journal._os, name)
        @staticmethod
        def fdatasync(fd):
            pass
    journal._os = journal.os
    journal.os = _NoSync()
from bridge.cli import main
sys.exit(main(sys.argv[1:]))
"""


def config(port: int, data_dir: Path, case: str) -> dict[str, Any]:
    found = listener_config(port, data_dir)
    if case in ("no-seal", "neither"):
        found["storage"]["memory_budget"] = "3GiB"
        found["defaults"] = {"roll": {"max_age": "120s", "max_bytes": "2GiB"}}
    return found


def one(work: Path, case: str, records: int, size: int, index: int) -> dict[str, float]:
    port = free_port()
    name = f"{case}-{index}"
    nosync = "1" if case in ("no-sync", "neither") else "0"
    serve = start_serve(
        config(port, work / f"{name}-store", case), work, name, launcher=("-c", _SERVE, nosync)
    )
    try:
        wait_port(port)
        bootstrap = f"127.0.0.1:{port}"
        perf_test(bootstrap, "t", 20_000, size)
        before = proc_stat(serve.pid)
        result = perf_test(bootstrap, "t", records, size)
        after = proc_stat(serve.pid)
        if before is None or after is None:
            raise BenchError(f"serve ({case}) ended during the run")
    finally:
        serve.terminate()
        serve.wait(timeout=120)
    return {"records_per_s": result["rate"], "cpu_s": after.cpu_s - before.cpu_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
    try:
        with tempfile.TemporaryDirectory(prefix="plateau-limits-") as tmp:
            for index in range(args.rounds):
                for case in CASES:
                    runs[case].append(one(Path(tmp), case, args.records, args.size, index))
                    print(case, runs[case][-1], flush=True)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    base = statistics.median(r["records_per_s"] for r in runs["as-is"])
    summary = {
        case: {
            "records_per_s": statistics.median(r["records_per_s"] for r in found),
            "cpu_s": statistics.median(r["cpu_s"] for r in found),
            "ratio": statistics.median(r["records_per_s"] for r in found) / base,
        }
        for case, found in runs.items()
    }
    for case, row in summary.items():
        print(
            f"{case:8s} {row['records_per_s']:10,.0f}/s  cpu {row['cpu_s']:5.2f} s  "
            f"{row['ratio']:.2f}x"
        )
    body = {"records": args.records, "size": args.size, "runs": runs, "summary": summary}
    print(f"wrote {write_results('produce-limits', body)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
