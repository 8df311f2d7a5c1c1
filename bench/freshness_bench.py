"""Freshness: how long from produce to visible in a query, at a steady produce rate.

For each system, a fresh 8-partition topic, the system started on it, then a producer
writing `--rate` records/s of `--value-bytes` for `--seconds`. A watcher samples every 50 ms
what a query would see:

- plateau serve (raw format, roll max_age `--max-age`): the manifest's watermark per
  partition, since a query plans from the manifest's sealed segments;
- Spark Structured Streaming (Kafka source → Parquet sink, trigger processingTime
  `--trigger-seconds`): the batches committed to the sink's _spark_metadata log (what
  spark.read.parquet of the sink sees), their highest offset per partition.

A record's latency is the first sample at which it was visible minus its Kafka CreateTime
(set by the producer when it handed the record over). Reported: p50, p90, p99 and max over
every record, after a warm-up (the first `--warmup` seconds of records are not counted, so
start-up does not count as staleness).

    .venv/bin/python bench/freshness_bench.py --rate 50000 --seconds 30
"""

from __future__ import annotations

import argparse
import bisect
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from confluent_kafka import KafkaError, Message, Producer
from ingest_bench import BENCH_DIR, PYTHON, REPO, BenchError, broker, raw_values

from bridge.demo.producer import producer_config
from bridge.local_kafka.topics import create_topic
from plateau_core import Store

SAMPLE_S = 0.05
SPARK_RUNNER = BENCH_DIR / "freshness_spark.py"


@dataclass
class Produced:
    """Per partition: offsets and CreateTimes (ms) in delivery order."""

    offsets: dict[int, list[int]] = field(default_factory=dict)
    created_ms: dict[int, list[int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, partition: int, offset: int, created_ms: int) -> None:
        self.offsets.setdefault(partition, []).append(offset)
        self.created_ms.setdefault(partition, []).append(created_ms)

    def ends(self) -> dict[int, int]:
        return {p: max(o) + 1 for p, o in self.offsets.items()}


def produce_steadily(
    bootstrap: str, topic: str, partitions: int, rate: int, seconds: float, value_bytes: int
) -> Produced:
    produced = Produced()

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            if len(produced.failures) < 5:
                produced.failures.append(str(err))
            return
        produced.add(msg.partition(), msg.offset(), msg.timestamp()[1])

    config: dict[str, Any] = producer_config(bootstrap)
    config["on_delivery"] = delivered
    config["log_level"] = 3  # errors only: no "coordinator load in progress" retry notices
    producer = Producer(config)
    total = int(rate * seconds)
    started = time.monotonic()
    for count, value in enumerate(raw_values(total, value_bytes, seed=11)):
        if count % 500 == 0:
            ahead = count / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
            producer.poll(0)
        while True:
            try:
                producer.produce(topic, value, partition=count % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(60):
        raise BenchError(f"records to {topic!r} not delivered within 60s")
    if produced.failures:
        raise BenchError(f"delivery failed: {produced.failures}")
    return produced


class Watcher:
    """Samples what is visible per partition every SAMPLE_S, on a thread."""

    def __init__(self, visible: Callable[[], dict[int, int]]) -> None:
        self.visible = visible
        self.samples: dict[int, tuple[list[float], list[int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="watcher", daemon=True)
        self.errors: list[str] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def seen(self) -> dict[int, int]:
        return {p: visible[-1] for p, (_, visible) in self.samples.items() if visible}

    def _loop(self) -> None:
        while not self._stop.is_set():
            now_ms = time.time() * 1000
            try:
                current = self.visible()
            except Exception as exc:  # a half-written file: the next sample reads it
                self.errors.append(str(exc))
                current = {}
            for partition, end in current.items():
                times, ends = self.samples.setdefault(partition, ([], []))
                if not ends or end > ends[-1]:
                    times.append(now_ms)
                    ends.append(end)
            self._stop.wait(SAMPLE_S)


def latencies(produced: Produced, watcher: Watcher, after_ms: float) -> list[float]:
    """Seconds from CreateTime to the first sample showing the record, records created after
    `after_ms` only."""
    out: list[float] = []
    for partition, offsets in produced.offsets.items():
        times, ends = watcher.samples.get(partition, ([], []))
        for offset, created in zip(offsets, produced.created_ms[partition], strict=True):
            if created < after_ms:
                continue
            i = bisect.bisect_right(ends, offset)  # the first sample whose end passes it
            if i == len(ends):
                raise BenchError(f"partition {partition} offset {offset} never became visible")
            out.append((times[i] - created) / 1000)
    return sorted(out)


def percentile(values: list[float], q: float) -> float:
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


# --- the systems ----------------------------------------------------------------------------


class PlateauSystem:
    def __init__(self, bootstrap: str, topic: str, work: Path, max_age: str) -> None:
        self.data_dir = work / "plateau-data"
        self.max_age = max_age
        config = {
            "kafka": {"bootstrap_servers": bootstrap, "group_id": f"fresh-{uuid.uuid4().hex}"},
            "storage": {"data_dir": str(self.data_dir)},
            "defaults": {"roll": {"max_age": max_age}},
            "topics": [{"source": topic}],
            "metrics": {"listen": "127.0.0.1:0"},
        }
        self.config = work / "plateau.yaml"
        self.config.write_text(json.dumps(config))
        self.store = Store.open(self.data_dir)
        self.topic = topic
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [PYTHON, "-m", "bridge.cli", "--log-level", "WARNING", "serve"]
        self.proc = subprocess.Popen([*argv, "--config", str(self.config)], cwd=REPO)

    def visible(self) -> dict[int, int]:
        return {s.partition: s.next_offset for s in self.store.spans(self.topic)}

    def stop(self) -> None:
        _stop(self.proc)
        self.store.close()


class SparkSystem:
    def __init__(self, bootstrap: str, topic: str, work: Path, trigger_s: float) -> None:
        self.out = work / "spark-sink"
        self.argv = [PYTHON, str(SPARK_RUNNER), "--bootstrap", bootstrap, "--topic", topic]
        self.argv += ["--out", str(self.out), "--trigger-seconds", str(trigger_s)]
        self.proc: subprocess.Popen[bytes] | None = None
        self._read: set[str] = set()
        self._ends: dict[int, int] = {}

    def start(self) -> None:
        log = (self.out.parent / "spark.log").open("wb")
        self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=log, stderr=log)

    def visible(self) -> dict[int, int]:
        log = self.out / "_spark_metadata"
        if not log.is_dir():
            return dict(self._ends)
        for entry in sorted(log.iterdir()):
            if entry.name.startswith(".") or entry.name in self._read:
                continue
            for line in entry.read_text().splitlines()[1:]:  # the first line is the version
                path = json.loads(line)["path"].removeprefix("file://")
                if path in self._read:
                    continue
                table = pq.read_table(path, columns=["partition", "offset"])
                for partition, offset in zip(
                    table.column("partition").to_pylist(),
                    table.column("offset").to_pylist(),
                    strict=True,
                ):
                    self._ends[partition] = max(self._ends.get(partition, 0), offset + 1)
                self._read.add(path)
            self._read.add(entry.name)
        return dict(self._ends)

    def stop(self) -> None:
        _stop(self.proc)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def measure(
    system: PlateauSystem | SparkSystem,
    bootstrap: str,
    topic: str,
    *,
    partitions: int,
    rate: int,
    seconds: float,
    warmup_s: float,
    value_bytes: int,
) -> dict[str, Any]:
    watcher = Watcher(system.visible)
    system.start()
    watcher.start()
    try:
        # Until the system shows the warm-up records, it is starting, not stale.
        warm = produce_steadily(bootstrap, topic, partitions, rate, warmup_s, value_bytes)
        _wait_visible(watcher, warm.ends(), timeout_s=180)
        measured_from = time.time() * 1000
        produced = produce_steadily(bootstrap, topic, partitions, rate, seconds, value_bytes)
        ends = {p: max(warm.ends().get(p, 0), e) for p, e in produced.ends().items()}
        _wait_visible(watcher, ends, timeout_s=120)
    finally:
        watcher.stop()
        system.stop()
    values = latencies(produced, watcher, measured_from)
    return {
        "records": len(values),
        "p50_s": percentile(values, 0.50),
        "p90_s": percentile(values, 0.90),
        "p99_s": percentile(values, 0.99),
        "max_s": round(values[-1], 3),
        "watch_errors": watcher.errors[:3],
    }


def _wait_visible(watcher: Watcher, ends: dict[int, int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = watcher.seen()
        if all(seen.get(p, 0) >= end for p, end in ends.items()):
            return
        time.sleep(0.1)
    raise BenchError(f"not visible within {timeout_s:.0f}s: saw {watcher.seen()}, want {ends}")


def run_freshness(
    bootstrap: str,
    work: Path,
    *,
    rate: int,
    seconds: float,
    warmup_s: float,
    max_age: str,
    trigger_s: float,
    partitions: int = 8,
    value_bytes: int = 128,
    systems: tuple[str, ...] = ("plateau", "spark"),
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in systems:
        topic = f"fresh-{name}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, partitions)
        folder = work / f"fresh-{name}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        system: PlateauSystem | SparkSystem
        if name == "plateau":
            system = PlateauSystem(bootstrap, topic, folder, max_age)
            setting = f"roll max_age {max_age}"
        else:
            system = SparkSystem(bootstrap, topic, folder, trigger_s)
            setting = f"trigger processingTime {trigger_s:g} s"
        print(f"freshness: {name} ({setting}) at {rate:,} records/s ...", flush=True)
        found = measure(
            system,
            bootstrap,
            topic,
            partitions=partitions,
            rate=rate,
            seconds=seconds,
            warmup_s=warmup_s,
            value_bytes=value_bytes,
        )
        found["setting"] = setting
        print(
            f"  {name}: p50 {found['p50_s']} s, p99 {found['p99_s']} s, max {found['max_s']} s",
            flush=True,
        )
        results[name] = found
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--max-age", default="1s", help="plateau's roll max_age")
    parser.add_argument("--trigger-seconds", type=float, default=1.0, help="Spark's trigger")
    parser.add_argument("--systems", default="plateau,spark")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="plateau-fresh-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        with broker(work, "1g") as kafka:
            found = run_freshness(
                kafka.bootstrap_servers,
                work,
                rate=args.rate,
                seconds=args.seconds,
                warmup_s=args.warmup,
                max_age=args.max_age,
                trigger_s=args.trigger_seconds,
                systems=tuple(args.systems.split(",")),
            )
    print(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
