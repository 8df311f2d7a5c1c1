"""The Python ceiling of bench/ingest_bench.py, run as its own process; prints one JSON line.

    python bench/ingest_ceiling.py --bootstrap B --topic T --expected N --group G

A plain confluent_kafka Consumer (own group, auto.offset.reset earliest, consume(10000))
that touches each message's value(), offset() and timestamp() and nothing else, until
`expected` records are read. It imports nothing but confluent_kafka and the standard
library, so its start-up is not charged with imports it does not need.

Times are CLOCK_MONOTONIC (system-wide on Linux), so the parent can relate them to its own.
The helpers here (thread CPU from /proc, the garbage-collector timer) are shared with
bench/ingest_probe.py.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message

STARTED = time.monotonic()
POLL_BATCH = 10_000
STEADY = (0.1, 0.9)  # the window of the steady rate: from 10% to 90% of the records
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_ticks(pid: int | str = "self") -> dict[tuple[str, str], int]:
    """CPU clock ticks (user + system) of each live thread of a process, by (id, name)."""
    found: dict[tuple[str, str], int] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            comm = (task / "comm").read_text().strip()
            raw = (task / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        found[(task.name, comm)] = int(fields[11]) + int(fields[12])
    return found


def thread_cpu(pid: int | str = "self") -> dict[str, float]:
    """CPU seconds of a process's threads: main, librdkafka's (rdk:*), other."""
    groups: dict[str, float] = defaultdict(float)
    main = str(os.getpid() if pid == "self" else pid)
    for (tid, comm), ticks in thread_ticks(pid).items():
        cpu = ticks / CLK_TCK
        if tid == main:
            groups["main thread"] += cpu
        elif comm.startswith("rdk:"):
            groups[comm.rstrip("0123456789") + "*"] += cpu
        else:
            groups["other threads"] += cpu
    return {k: round(v, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])}


def snapshot(broker_pid: int) -> dict[str, float]:
    """What bench/ingest_bench.py's Snapshot holds, taken from inside this process."""
    broker = 0.0
    if broker_pid:
        raw = Path(f"/proc/{broker_pid}/stat").read_text()
        fields = raw[raw.rindex(")") + 2 :].split()
        broker = sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK
    return {
        "t": time.monotonic(),
        "cpu_s": cpu_s(),
        "main_s": thread_cpu().get("main thread", 0.0),
        "broker_s": broker,
    }


class GcTimer:
    """Time spent in the cyclic garbage collector, per generation (gc.callbacks)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._started = 0.0

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.seconds[generation] += time.perf_counter() - self._started
        self.count[generation] += 1

    def report(self) -> dict[str, Any]:
        return {
            "seconds": round(sum(self.seconds), 3),
            "seconds_by_generation": [round(x, 3) for x in self.seconds],
            "collections_by_generation": self.count,
        }


def check(message: Message) -> bool:
    """True for a record; False for an event to ignore; raises on a real error."""
    error = message.error()
    if error is None:
        return True
    if error.code() == KafkaError._PARTITION_EOF:
        return False
    raise RuntimeError(f"consumer error: {error}")


# --- the Python ceiling ----------------------------------------------------------------------


def consume(
    bootstrap: str,
    topic: str,
    expected: int,
    group: str,
    timeout_s: float,
    properties: dict[str, str],
    broker_pid: int,
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            **properties,
        }
    )
    consumer.subscribe([topic])
    records = 0
    value_bytes = 0
    last_offset = -1
    last_ts = 0
    first: float | None = None
    steady: dict[str, dict[str, float]] = {}
    marks = {"a": STEADY[0] * expected, "b": STEADY[1] * expected}
    deadline = time.monotonic() + timeout_s
    with GcTimer() as collector:
        while records < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"read {records} of {expected} records within {timeout_s}s")
            for message in consumer.consume(num_messages=POLL_BATCH, timeout=1.0):
                if message.error() is not None and not check(message):
                    continue
                value = message.value()
                value_bytes += 0 if value is None else len(value)
                last_offset = message.offset() or 0
                last_ts = message.timestamp()[1]
                records += 1
            if first is None and records:
                first = time.monotonic()
            for mark, at in marks.items():
                if mark not in steady and records >= at:
                    steady[mark] = snapshot(broker_pid)
        done = time.monotonic()
    cpu_at_done = cpu_s()
    threads = thread_cpu()
    consumer.close()
    print(
        json.dumps(
            {
                "started": STARTED,
                "first_record": first,
                "done": done,
                "records": records,
                "value_bytes": value_bytes,
                "cpu_s_at_done": cpu_at_done,
                "thread_cpu_s": threads,
                "steady": steady,
                "gc": collector.report(),
                "last_offset_seen": last_offset,
                "last_timestamp_seen": last_ts,
            }
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--expected", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--broker-pid", type=int, default=0)
    parser.add_argument("--property", action="append", default=[], help="librdkafka k=v")
    args = parser.parse_args(argv)
    consume(
        args.bootstrap,
        args.topic,
        args.expected,
        args.group,
        args.timeout,
        dict(p.split("=", 1) for p in args.property),
        args.broker_pid,
    )
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: not part of the measurement


if __name__ == "__main__":
    sys.exit(main())
