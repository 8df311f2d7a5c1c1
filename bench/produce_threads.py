"""Where a round of the Java producer's defaults goes, on both sides: kafka-producer-perf-test
(acks=all, idempotent, 16 KiB batches, 5 requests in flight) with `--print-metrics` into the
local broker and into one `plateau serve` (the produce-only config of produce_bench.py),
alternating, and serve's CPU per record by thread (the names serve gives its threads:
kafka-api, journal, seal_N, ...).

The client's own metrics say what each side cost it: request latency, records per request,
time waiting for buffer memory, its I/O thread's idle share, throttle time. `--fill-gb`
writes that many GB of a file between rounds, so that later rounds run with the page cache
full, as a machine that has run for a while does.

    .venv/bin/python bench/produce_threads.py --records 1000000 --size 1024 --rounds 2
    .venv/bin/python bench/produce_threads.py --records 1000000 --size 1024 --rounds 5 \\
        --fill-gb 4 --no-broker
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

from benchdata import write_results
from ingest_bench import BenchError, broker, proc_stat
from ingest_ceiling import CLK_TCK, thread_ticks
from produce_bench import (
    free_port,
    listener_config,
    perf_command,
    perf_summary,
    start_serve,
    wait_port,
)

from bridge.local_kafka.topics import create_topic

PARTITIONS = 8
# The perf test's client metrics worth comparing, as --print-metrics names them.
CLIENT_METRICS = (
    "request-latency-avg",
    "records-per-request-avg",
    "batch-size-avg",
    "record-queue-time-avg",
    "bufferpool-wait-ratio",
    "io-wait-ratio",
    "produce-throttle-time-avg",
)
_METRIC = re.compile(r"^producer-metrics:([a-z-]+):\{client-id=[^}]*\}\s*:\s*([0-9.NaE-]+)$")


def client_metrics(stdout: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in stdout.splitlines():
        match = _METRIC.match(line.strip())
        if match and match.group(1) in CLIENT_METRICS:
            found[match.group(1)] = float(match.group(2))
    return found


def by_thread(
    before: dict[tuple[str, str], int], after: dict[tuple[str, str], int]
) -> dict[str, float]:
    """CPU seconds per thread name between two samples; seal_N summed as `seal`."""
    found: dict[str, float] = defaultdict(float)
    for key, ticks in after.items():
        name = re.sub(r"_\d+$", "", key[1])
        found[name] += (ticks - before.get(key, 0)) / CLK_TCK
    return dict(found)


class ReceiveQueue:
    """Bytes the client sent that the server has not read yet, sampled with `ss` on the
    server's port while a run goes: requests waiting in the socket before the server's
    loop reads them (mean bytes over the request rate is their mean wait)."""

    def __init__(self, port: int, every_s: float = 0.005) -> None:
        self.port, self.every_s = port, every_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ReceiveQueue:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        command = ["ss", "-tnH", "state", "established", f"( sport = :{self.port} )"]
        while not self._stop.wait(self.every_s):
            listed = subprocess.run(command, capture_output=True, text=True, check=False)
            self.samples.extend(int(line.split()[0]) for line in listed.stdout.splitlines())

    def summary(self) -> dict[str, float]:
        if not self.samples:
            return {}
        return {
            "samples": len(self.samples),
            "empty_share": sum(1 for b in self.samples if b == 0) / len(self.samples),
            "mean_bytes": statistics.mean(self.samples),
            "max_bytes": max(self.samples),
        }


def one(
    target: str, bootstrap: str, pid: int, records: int, size: int, queue: bool = False
) -> dict[str, Any]:
    command = [*perf_command(bootstrap, "t", records, size), "--print-metrics"]
    before, threads_before = proc_stat(pid), thread_ticks(pid)
    with ReceiveQueue(int(bootstrap.rsplit(":", 1)[1])) if queue else nullcontext() as waiting:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    after, threads_after = proc_stat(pid), thread_ticks(pid)
    if before is None or after is None:
        raise BenchError(f"{target} ended during the run")
    summary = perf_summary(bootstrap, done.returncode, done.stdout, done.stderr)
    found: dict[str, Any] = {
        "target": target,
        "records_per_s": summary["rate"],
        "server_us_per_record": (after.cpu_s - before.cpu_s) / records * 1e6,
        "client": client_metrics(done.stdout),
    }
    if waiting is not None:
        found["receive_queue"] = waiting.summary()
    if target == "plateau":
        found["threads_us_per_record"] = {
            name: cpu / records * 1e6
            for name, cpu in sorted(by_thread(threads_before, threads_after).items())
            if cpu > 0
        }
    return found


def fill(work: Path, index: int, gigabytes: int) -> None:
    """Dirty `gigabytes` of page cache (a file of zeros, written through it)."""
    subprocess.run(
        [
            "dd",
            "if=/dev/zero",
            f"of={work / f'fill-{index}'}",
            "bs=1M",
            f"count={gigabytes * 1024}",
        ],
        check=True,
        capture_output=True,
    )


def run(
    records: int,
    size: int,
    rounds: int,
    fill_gb: int,
    with_broker: bool,
    consolidate: bool,
    max_rate: str | None,
    merge_below: str | None,
    queue: bool,
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="plateau-produce-threads-") as tmp,
        ExitStack() as stack,
    ):
        work = Path(tmp)
        targets: list[tuple[str, str, int]] = []
        if with_broker:
            kafka = stack.enter_context(broker(work, "1g"))
            assert kafka.pid is not None
            create_topic(kafka.bootstrap_servers, "t", PARTITIONS)
            targets.append(("kafka", kafka.bootstrap_servers, kafka.pid))
        port = free_port()
        config = listener_config(port, work / "store")
        if not consolidate:
            config["topics"].append({"name": "t", "partitions": PARTITIONS, "consolidate": False})
        elif merge_below is not None:
            merging = {"merge_below": merge_below}
            config["topics"].append({"name": "t", "partitions": PARTITIONS, "consolidate": merging})
        if max_rate is not None:
            config["storage"]["consolidate_max_rate"] = None if max_rate == "none" else max_rate
        serve = start_serve(config, work, "serve")
        stack.callback(serve.wait, 120)
        stack.callback(serve.terminate)
        wait_port(port)
        targets.append(("plateau", f"127.0.0.1:{port}", serve.pid))
        for _, bootstrap, pid in targets:  # both JVMs and serve warm
            one("warm", bootstrap, pid, 200_000, size)
        for index in range(rounds):
            if index and fill_gb:
                fill(work, index, fill_gb)
            for target, bootstrap, pid in targets if index % 2 == 0 else targets[::-1]:
                done = one(target, bootstrap, pid, records, size, queue)
                done["round"] = index
                found.append(done)
                print(line(done), flush=True)
    return found


def line(done: dict[str, Any]) -> str:
    client = done["client"]
    text = (
        f"round {done['round']} {done['target']:8s} {done['records_per_s']:10,.0f}/s  "
        f"server {done['server_us_per_record']:5.2f} us/record  "
        f"request {client.get('request-latency-avg', 0):5.2f} ms  "
        f"{client.get('records-per-request-avg', 0):5.0f} records/request  "
        f"buffer wait {client.get('bufferpool-wait-ratio', 0):.3f}  "
        f"I/O idle {client.get('io-wait-ratio', 0):.3f}"
    )
    waiting = done.get("receive_queue")
    if waiting:
        text += (
            f"\n    unread in the socket: {waiting['mean_bytes']:,.0f} bytes on average, "
            f"none in {waiting['empty_share']:.0%} of {waiting['samples']} samples"
        )
    threads = done.get("threads_us_per_record")
    if threads:
        text += "\n    " + "  ".join(f"{k} {v:.2f}" for k, v in threads.items() if v >= 0.01)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fill-gb", type=int, default=0, help="GB written between rounds")
    parser.add_argument("--no-broker", action="store_true", help="plateau serve only")
    parser.add_argument(
        "--no-consolidate", action="store_true", help="the topic declared with consolidate: false"
    )
    parser.add_argument(
        "--consolidate-max-rate",
        help="storage.consolidate_max_rate of serve (like 32MiB; none: unpaced); "
        "default: serve's own",
    )
    parser.add_argument(
        "--merge-below",
        help="the topic's consolidate.merge_below (like 64MiB: every segment under the "
        "target is merged, as before that setting); default: serve's own",
    )
    parser.add_argument(
        "--receive-queue",
        action="store_true",
        help="sample the bytes each server has not read yet (ss, every 5 ms; costs CPU)",
    )
    args = parser.parse_args(argv)
    runs = run(
        args.records,
        args.size,
        args.rounds,
        args.fill_gb,
        not args.no_broker,
        not args.no_consolidate,
        args.consolidate_max_rate,
        args.merge_below,
        args.receive_queue,
    )
    path = write_results(
        "produce-threads",
        {
            "records": args.records,
            "size": args.size,
            "rounds": args.rounds,
            "fill_gb": args.fill_gb,
            "consolidate": not args.no_consolidate,
            "consolidate_max_rate": args.consolidate_max_rate,
            "merge_below": args.merge_below,
            "runs": runs,
        },
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
