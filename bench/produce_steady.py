"""The Java producer's defaults into the local Kafka broker and into plateau's Kafka API in
long runs, alternating: records/s once both sides are warm, and where each side's CPU goes.

bench/produce_bench.py times 500,000 records per case: a few seconds, in which the client's
own JVM is still compiling (its JIT threads take seconds of CPU on two shared cores). Here
the broker and serve are each warmed with `--warm` records, then every round sends
`--records` records (2M by default) to each, in alternating order, with the perf test and
then with the librdkafka producer of produce_bench.py, and reports per run:

  - records/s acknowledged (the perf test's own figure);
  - CPU per record of the receiving process (the broker's JVM, or serve);
  - CPU per record of the client (the perf test's JVM: also its JIT compiler threads and its
    garbage collector's);
  - the perf test's own figures of its requests (`--print-metrics`): their average latency,
    records per request, and the share of time its send() waited for buffer memory;
  - the machine's idle share during the run (all cores; what neither side could use).

Ratios are plateau's median over the broker's median, per client and record size.

    .venv/bin/python bench/produce_steady.py --records 2000000 --rounds 2
    .venv/bin/python bench/produce_steady.py --sizes 128 --rounds 3 --clients perf-test
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ingest_bench import RESULTS_DIR, BenchError, broker, proc_stat
from ingest_ceiling import thread_ticks
from produce_bench import (
    PARTITIONS,
    librdkafka,
    perf_command,
    perf_summary,
    perf_test,
    start_listener,
)

from bridge.local_kafka.topics import create_topic

CLK_TCK = os.sysconf("SC_CLK_TCK")
CLIENTS = ("perf-test", "librdkafka")
# HotSpot names its compiler threads so (the name is cut to 15 characters by the kernel).
_JIT_PREFIXES = ("C1 CompilerThre", "C2 CompilerThre")
_GC_PREFIXES = ("GC Thread", "G1 ")  # G1's workers, marker, refinement and service threads
# The perf test's client metrics (`--print-metrics`) kept per run.
_METRICS = re.compile(
    r"^producer-metrics:(request-latency-avg|records-per-request-avg|bufferpool-wait-ratio)"
    r":\{client-id=[^}]*\}\s*:\s*([\d.]+)$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Run:
    client: str  # perf-test | librdkafka
    target: str  # kafka | plateau
    size: int
    records: int
    records_per_s: float
    p99_ms: float | None  # the perf test's; librdkafka's producer here reports none
    server_us_per_record: float
    client_us_per_record: float
    client_jit_us_per_record: float
    client_gc_us_per_record: float
    machine_idle: float  # share of all cores idle or waiting for I/O
    # The perf test's: request-latency-avg (ms), records-per-request-avg, bufferpool-wait-ratio
    request_latency_ms: float | None = None
    records_per_request: float | None = None
    buffer_wait: float | None = None


class _ClientThreads:
    """CPU ticks of each thread of the client JVM, the last seen before it exited."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ticks: dict[tuple[str, str], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.ticks.update(thread_ticks(self.pid))
            self._stop.wait(0.2)

    def stop(self) -> tuple[float, float, float]:
        """CPU seconds of the whole client, of its JIT compiler threads and of its garbage
        collector's."""
        self._stop.set()
        self._thread.join()
        total = sum(self.ticks.values()) / CLK_TCK
        jit = sum(t for (_, comm), t in self.ticks.items() if comm.startswith(_JIT_PREFIXES))
        gc = sum(t for (_, comm), t in self.ticks.items() if comm.startswith(_GC_PREFIXES))
        return total, jit / CLK_TCK, gc / CLK_TCK


def _machine() -> tuple[int, int]:
    """(all ticks, idle + iowait ticks) of every core since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]


@dataclass(frozen=True)
class _Sent:
    """What one client run reports of itself."""

    records_per_s: float
    p99_ms: float | None
    client_s: float  # its CPU seconds
    jit_s: float  # of them, its JIT compiler threads'
    gc_s: float = 0.0  # and its garbage collector's
    metrics: dict[str, float] | None = None  # the perf test's (_METRICS)


def measured(
    client: str, target: str, server_pid: int, records: int, size: int, send: Callable[[], _Sent]
) -> Run:
    """`send` run once, with the server's CPU and the machine's idle share around it."""
    server_before = proc_stat(server_pid)
    machine_before = _machine()
    sent = send()
    machine_after = _machine()
    server_after = proc_stat(server_pid)
    if server_before is None or server_after is None:
        raise BenchError(f"{target} ended during the {client} run")
    total, idle = (a - b for a, b in zip(machine_after, machine_before, strict=True))
    metrics = sent.metrics or {}
    return Run(
        client,
        target,
        size,
        records,
        sent.records_per_s,
        sent.p99_ms,
        (server_after.cpu_s - server_before.cpu_s) * 1e6 / records,
        sent.client_s * 1e6 / records,
        sent.jit_s * 1e6 / records,
        sent.gc_s * 1e6 / records,
        idle / total if total else 0.0,
        metrics.get("request-latency-avg"),
        metrics.get("records-per-request-avg"),
        metrics.get("bufferpool-wait-ratio"),
    )


def perf_test_run(target: str, bootstrap: str, server_pid: int, records: int, size: int) -> Run:
    def send() -> _Sent:
        command = perf_command(bootstrap, "t", records, size)
        command.insert(command.index("--producer-props"), "--print-metrics")
        client = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        threads = _ClientThreads(client.pid)
        out, err = client.communicate(timeout=900)
        client_s, jit_s, gc_s = threads.stop()
        found = perf_summary(bootstrap, client.returncode, out, err)
        metrics = {name: float(value) for name, value in _METRICS.findall(out)}
        return _Sent(found["rate"], found["p99"], client_s, jit_s, gc_s, metrics)

    return measured("perf-test", target, server_pid, records, size, send)


def librdkafka_run(target: str, bootstrap: str, server_pid: int, records: int, size: int) -> Run:
    """The librdkafka producer of bench/produce_bench.py (acks=all, idempotent)."""

    def send() -> _Sent:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        acked, seconds = librdkafka(bootstrap, "t", records, size)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if acked != records:
            raise BenchError(f"librdkafka -> {target}: {acked} of {records} acknowledged")
        client_s = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return _Sent(records / seconds, None, client_s, 0.0)

    return measured("librdkafka", target, server_pid, records, size, send)


def run(
    records: int, sizes: list[int], rounds: int, warm: int, clients: tuple[str, ...] = CLIENTS
) -> list[Run]:
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="plateau-produce-steady-") as tmp:
        work = Path(tmp)
        with broker(work, "1g") as kafka:
            assert kafka.pid is not None
            api = start_listener(work, "api", "journal")
            try:
                targets = [
                    ("kafka", kafka.bootstrap_servers, kafka.pid),
                    ("plateau", api.bootstrap, api.process.pid),
                ]
                # Both JVMs and serve warm: the first sizes' runs would otherwise pay it.
                create_topic(kafka.bootstrap_servers, "t", PARTITIONS)
                for _, bootstrap, _ in targets:
                    perf_test(bootstrap, "t", warm, max(sizes))
                for size in sizes:
                    for index in range(rounds):
                        order = targets if index % 2 == 0 else targets[::-1]
                        for client in clients:
                            for target, bootstrap, pid in order:
                                done = _RUNS[client](target, bootstrap, pid, records, size)
                                runs.append(done)
                                print(_line(done), flush=True)
            finally:
                api.process.terminate()
                api.process.wait(60)
    return runs


_RUNS: dict[str, Callable[[str, str, int, int, int], Run]] = {
    "perf-test": perf_test_run,
    "librdkafka": librdkafka_run,
}


def _line(run: Run) -> str:
    p99 = " " * 12 if run.p99_ms is None else f"p99 {run.p99_ms:>5.0f} ms"
    line = (
        f"  {run.client:10} {run.target:8} {run.size:>5} B {run.records_per_s:>10,.0f} records/s  "
        f"{p99}  server {run.server_us_per_record:5.2f} us/rec  "
        f"client {run.client_us_per_record:5.2f} us/rec "
        f"(JIT {run.client_jit_us_per_record:4.2f}, GC {run.client_gc_us_per_record:4.2f})  "
        f"idle {run.machine_idle:4.0%}"
    )
    if run.request_latency_ms is not None:
        line += (
            f"  request {run.request_latency_ms:5.1f} ms, {run.records_per_request or 0:4.0f} "
            f"records, buffer wait {run.buffer_wait or 0:.3f}"
        )
    return line


def summary(runs: list[Run]) -> dict[str, dict[str, float]]:
    """Per client and size: each target's median records/s and their ratio."""
    found: dict[str, dict[str, float]] = {}
    for client, size in sorted({(r.client, r.size) for r in runs}):
        rates = {
            target: statistics.median(
                r.records_per_s
                for r in runs
                if r.client == client and r.size == size and r.target == target
            )
            for target in ("kafka", "plateau")
        }
        found[f"{client} {size} B"] = {
            **rates,
            "plateau_over_kafka": rates["plateau"] / rates["kafka"],
        }
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="per run")
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--rounds", type=int, default=2, help="runs per target and size")
    parser.add_argument("--warm", type=int, default=200_000, help="records before the runs")
    parser.add_argument(
        "--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS), help="which producers"
    )
    args = parser.parse_args(argv)
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    runs = run(args.records, args.sizes, args.rounds, args.warm, tuple(args.clients))
    result = {
        "records": args.records,
        "rounds": args.rounds,
        "partitions": PARTITIONS,
        "runs": [asdict(r) for r in runs],
        "summary": summary(runs),
    }
    for case, row in result["summary"].items():
        print(
            f"{case}: kafka {row['kafka']:,.0f}/s, plateau {row['plateau']:,.0f}/s, "
            f"plateau / kafka {row['plateau_over_kafka']:.2f}x"
        )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"produce-steady-{started}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
