"""Producers writing to plateau's Kafka API, beside the same producers writing to the local
Apache Kafka broker, and beside the consumer path (producer -> Kafka -> plateau serve).

One run, one machine, one broker; per record size (128 B and 1 KiB by default):

  a. kafka-producer-perf-test (acks=all, idempotent: its defaults) -> local Kafka broker
  a'. the same into a topic with `flush.messages=1`: the broker syncs its log after every
     append, the durability plateau's journal gives an acknowledgement (a Kafka broker
     otherwise leaves it to replication and syncs nothing before it answers)
  b. the same                                                     -> plateau serve's Kafka API
     (acks=all answered from the journal, the default)
  b'. the same -> a second plateau serve with `durability: segment` (acks=all answered once
     the records are in a sealed segment recorded in the manifest)
  c. the same -> local Kafka broker, with `plateau serve` consuming the topic: the time until
     every record is queryable in plateau
  c'. the same with the consumed topic's `roll.max_age` at 1 s, what produced topics get
     (a consumed topic's default is 10 s, which alone sets (c)'s time for a short run)
  and the perf test with 256 KiB batches, at a moderate 10,000 records/s, and a librdkafka
  producer (confluent-kafka, acks=all, idempotent), into (a) and (b).

Reported: records/s acknowledged, p50/p99 ack latency (the perf test's own), time until
queryable (every record in a sealed segment in the manifest), CPU seconds of the receiving
process(es) and their peak RSS. Ratios are against (a) of the same run, the numbers that
matter on a shared, noisy machine. Every target first takes `--warm` records of each size
(the broker's JVM compiles its hot paths during its first records); the client JVM of each
case still starts cold, which bench/produce_steady.py's long runs take out.

    .venv/bin/python bench/produce_bench.py --records 500000
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ingest_bench import PYTHON, REPO, RESULTS_DIR, BenchError, broker, proc_stat

from bridge.local_kafka import free_port
from bridge.local_kafka.jars import kafka_libs
from bridge.local_kafka.topics import create_topic

PARTITIONS = 8
# Producer batches of 256 KiB instead of the Java client's 16 KiB default.
TUNED = ("batch.size=262144", "linger.ms=20")
MODERATE_RATE = 10_000  # records/s, for the latency at moderate load
PERF = "org.apache.kafka.tools.ProducerPerformance"
_SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec .*?"
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th"
)
_LIBRDKAFKA = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
acked = [0]
def report(err, msg):
    if err is None:
        acked[0] += 1
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                     "enable.idempotence": True, "linger.ms": 5,
                     "batch.size": 1048576, "queue.buffering.max.messages": 1000000})
value = b"x" * size
started = time.perf_counter()
for i in range(count):
    while True:
        try:
            producer.produce(topic, value, on_delivery=report)
            break
        except BufferError:
            producer.poll(0.01)
    if i % 10000 == 0:
        producer.poll(0)
producer.flush(120)
print(acked[0], time.perf_counter() - started)
"""


@dataclass
class Sampler:
    """CPU seconds and peak RSS of some processes while a case runs."""

    pids: list[int]
    peak_rss: int = 0
    cpu_start: float = 0.0
    cpu_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _cpu(self) -> float:
        return sum(s.cpu_s for p in self.pids if (s := proc_stat(p)) is not None)

    def __enter__(self) -> Sampler:
        self.cpu_start = self._cpu()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            rss = sum(s.rss_bytes for p in self.pids if (s := proc_stat(p)) is not None)
            self.peak_rss = max(self.peak_rss, rss)

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.cpu_s = self._cpu() - self.cpu_start


@dataclass
class Case:
    name: str
    size: int
    records: int
    seconds: float
    records_per_s: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    queryable_s: float | None = None
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0


def perf_command(
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    props: tuple[str, ...] = (),
    throughput: int = -1,
) -> list[str]:
    """kafka-producer-perf-test's command line (its class, on the Kafka jars)."""
    return [
        "java",
        "-Xmx512m",
        "-cp",
        f"{kafka_libs()}/*",
        PERF,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(size),
        "--throughput",
        str(throughput),
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        *props,
    ]


def perf_summary(bootstrap: str, returncode: int, stdout: str, stderr: str) -> dict[str, float]:
    """The perf test's closing line: records, records/s and its latencies (ms). Only the
    closing line has percentiles; `--print-metrics` prints its metrics after it."""
    found = next(reversed(list(_SUMMARY.finditer(stdout))), None)
    if returncode != 0 or found is None:
        raise BenchError(f"perf test into {bootstrap} failed: {stdout[-800:]}{stderr[-800:]}")
    return {k: float(v) for k, v in found.groupdict().items()}


def perf_test(
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    props: tuple[str, ...] = (),
    throughput: int = -1,
) -> dict[str, float]:
    command = perf_command(bootstrap, topic, records, size, props, throughput)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    return perf_summary(bootstrap, done.returncode, done.stdout, done.stderr)


def librdkafka(bootstrap: str, topic: str, records: int, size: int) -> tuple[int, float]:
    done = subprocess.run(
        [PYTHON, "-c", _LIBRDKAFKA, bootstrap, topic, str(records), str(size)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"librdkafka producer failed: {done.stderr[-800:]}")
    acked, seconds = done.stdout.split()
    return int(acked), float(seconds)


def stored_records(data_dir: Path, topic: str) -> int:
    manifest = data_dir / "manifest.db"
    if not manifest.exists():
        return 0
    with sqlite3.connect(f"file:{manifest}?mode=ro", uri=True, timeout=10) as db:
        try:
            row = db.execute(
                "SELECT COALESCE(SUM(record_count), 0) FROM segments WHERE topic = ?", (topic,)
            ).fetchone()
        except sqlite3.OperationalError:
            return 0
    return int(row[0])


def wait_stored(data_dir: Path, topic: str, records: int, timeout_s: float = 600) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if stored_records(data_dir, topic) >= records:
            return time.monotonic()
        time.sleep(0.02)
    raise BenchError(f"{topic}: {stored_records(data_dir, topic)} of {records} stored in time")


def start_serve(
    config: dict[str, Any],
    work: Path,
    name: str,
    launcher: tuple[str, ...] = ("-m", "bridge.cli"),
) -> subprocess.Popen[bytes]:
    """`plateau serve` with `config`, its log in `work`; `launcher`: the interpreter's
    arguments before the CLI's (a bench's own `-c` script patches serve before it runs)."""
    path = work / f"{name}.json"
    path.write_text(json.dumps(config))
    log = (work / f"{name}.log").open("wb")
    return subprocess.Popen(
        [PYTHON, *launcher, "--log-level", "WARNING", "serve", "--config", str(path)],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def wait_port(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"nothing listens on {port}")


@dataclass(frozen=True)
class Listener:
    """A `plateau serve` with only the Kafka API, writing to its own store."""

    process: subprocess.Popen[bytes]
    bootstrap: str
    data_dir: Path


def listener_config(port: int, data_dir: Path, durability: str = "journal") -> dict[str, Any]:
    """serve's config with only the Kafka API: producers' topics are created on first use."""
    return {
        "storage": {"data_dir": str(data_dir), "memory_budget": "512MiB"},
        "kafka_api": {
            "listen": f"127.0.0.1:{port}",
            "auto_create_topics": True,
            "default_partitions": PARTITIONS,
            "durability": durability,
        },
        "metrics": {"enabled": False},
        "topics": [{"name": "warmup", "partitions": 1}],
    }


def start_listener(work: Path, name: str, durability: str) -> Listener:
    port = free_port()
    data_dir = work / f"{name}-store"
    process = start_serve(listener_config(port, data_dir, durability), work, name)
    try:
        wait_port(port)
    except BaseException:
        process.terminate()
        raise
    return Listener(process, f"127.0.0.1:{port}", data_dir)


def run(records: int, sizes: list[int], heap: str, warm: int) -> dict[str, Any]:
    cases: list[Case] = []
    with tempfile.TemporaryDirectory(prefix="plateau-produce-bench-") as tmp:
        work = Path(tmp)
        with broker(work, heap) as kafka:
            assert kafka.pid is not None
            # b: acks=all from the journal (the default); b': from sealed segments.
            api = start_listener(work, "api", "journal")
            segment = start_listener(work, "api-segment", "segment")
            try:
                # The broker's JVM compiles its hot paths during its first records: unwarmed,
                # the first case (128 B into Kafka) alone would pay for it. Every target takes
                # `warm` records of each size first, into a topic of its own.
                create_topic(kafka.bootstrap_servers, "warm", PARTITIONS)
                for bootstrap in (kafka.bootstrap_servers, api.bootstrap, segment.bootstrap):
                    for size in sizes:
                        perf_test(bootstrap, "warm", warm, size)
                for size in sizes:
                    cases += _one_size(
                        work, kafka.bootstrap_servers, kafka.pid, api, segment, records, size
                    )
            finally:
                for listener in (api, segment):
                    listener.process.terminate()
                    listener.process.wait(60)
    return {
        "records": records,
        "warm": warm,
        "partitions": PARTITIONS,
        "cases": [asdict(c) for c in cases],
    }


@dataclass(frozen=True)
class Target:
    label: str
    bootstrap: str
    pids: list[int]
    kafka: bool  # topics are created up front (plateau creates them on first produce)


def perf_case(
    name: str,
    target: Target,
    topic: str,
    records: int,
    size: int,
    *,
    props: tuple[str, ...] = (),
    throughput: int = -1,
    stored_in: Path | None = None,
    topic_config: dict[str, str] | None = None,
) -> Case:
    """One perf test run into `target`, sampled; `stored_in`: also wait until the store
    there holds every record, for the time until queryable."""
    if target.kafka:
        create_topic(target.bootstrap, topic, PARTITIONS, config=topic_config)
    with Sampler(target.pids) as sample:
        started = time.monotonic()
        perf = perf_test(target.bootstrap, topic, records, size, props, throughput)
        acked = time.monotonic()
        stored = None if stored_in is None else wait_stored(stored_in, topic, records)
    return Case(
        name,
        size,
        records,
        acked - started,
        perf["rate"],
        perf["p50"],
        perf["p99"],
        None if stored is None else stored - started,
        sample.cpu_s,
        sample.peak_rss / 1e6,
    )


def _one_size(
    work: Path,
    bootstrap: str,
    broker_pid: int,
    api: Listener,
    segment: Listener,
    records: int,
    size: int,
) -> list[Case]:
    kafka = Target("kafka", bootstrap, [broker_pid], kafka=True)
    listener = Target("plateau", api.bootstrap, [api.process.pid], kafka=False)
    sealed = Target("plateau-segment", segment.bootstrap, [segment.process.pid], kafka=False)
    found = [
        # a and b, each client with its defaults
        perf_case("perf-test -> kafka", kafka, f"a-{size}", records, size),
        # a': the broker syncing every append, as plateau's journal syncs every round
        perf_case(
            "perf-test -> kafka (flush.messages=1)",
            kafka,
            f"f-{size}",
            records,
            size,
            topic_config={"flush.messages": "1"},
        ),
        perf_case(
            "perf-test -> plateau", listener, f"b-{size}", records, size, stored_in=api.data_dir
        ),
        # b': the same with durability: segment (acks=all after a seal)
        perf_case(
            "perf-test -> plateau (durability: segment)",
            sealed,
            f"s-{size}",
            records,
            size,
            stored_in=segment.data_dir,
        ),
    ]
    moderate = max(1000, records // 20)
    for target in (kafka, listener):
        # Larger producer batches: what the per-batch costs are.
        found.append(
            perf_case(
                f"perf-test {' '.join(TUNED)} -> {target.label}",
                target,
                f"t{target.label[0]}-{size}",
                records,
                size,
                props=TUNED,
            )
        )
        # Moderate load: the acknowledgement latency when neither side is saturated.
        found.append(
            perf_case(
                f"perf-test at {MODERATE_RATE}/s -> {target.label}",
                target,
                f"m{target.label[0]}-{size}",
                moderate,
                size,
                throughput=MODERATE_RATE,
            )
        )
    found.append(_through_kafka(work, kafka, records, size))
    found.append(_through_kafka(work, kafka, records, size, roll_max_age="1s"))
    for target in (kafka, listener):
        topic = f"l-{target.label[0]}-{size}"
        if target.kafka:
            create_topic(bootstrap, topic, PARTITIONS)
        with Sampler(target.pids) as sample:
            acked_count, seconds = librdkafka(target.bootstrap, topic, records, size)
        if acked_count != records:
            raise BenchError(f"librdkafka -> {target.label}: {acked_count} of {records} acked")
        found.append(
            Case(
                f"librdkafka -> {target.label}",
                size,
                records,
                seconds,
                records / seconds,
                cpu_s=sample.cpu_s,
                peak_rss_mb=sample.peak_rss / 1e6,
            )
        )
    for case in found:
        print(json.dumps(asdict(case)), flush=True)
    return found


def _through_kafka(
    work: Path, kafka: Target, records: int, size: int, roll_max_age: str | None = None
) -> Case:
    """c: the perf test into Kafka while `plateau serve` consumes the topic (c': with
    `roll_max_age` for the consumed topic)."""
    suffix = "" if roll_max_age is None else "-roll"
    topic = f"c{suffix}-{size}"
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    consume_dir = work / f"consume{suffix}-{size}"
    consumed: dict[str, Any] = {"source": topic}
    if roll_max_age is not None:
        consumed["roll"] = {"max_age": roll_max_age}
    consumer = start_serve(
        {
            "kafka": {"bootstrap_servers": kafka.bootstrap, "group_id": f"bench{suffix}-{size}"},
            "storage": {"data_dir": str(consume_dir), "memory_budget": "512MiB"},
            "metrics": {"enabled": False},
            "topics": [consumed],
        },
        work,
        f"consume{suffix}-{size}",
    )
    try:
        time.sleep(3)  # joined the group before the first record
        both = Target("kafka+serve", kafka.bootstrap, [*kafka.pids, consumer.pid], kafka=False)
        return perf_case(
            "perf-test -> kafka -> plateau serve"
            + ("" if roll_max_age is None else f" (roll.max_age {roll_max_age})"),
            both,
            topic,
            records,
            size,
            stored_in=consume_dir,
        )
    finally:
        consumer.terminate()
        consumer.wait(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--sizes", default="128,1024")
    parser.add_argument("--heap", default="1g", help="the broker's heap")
    parser.add_argument(
        "--warm", type=int, default=200_000, help="records of each size into every target first"
    )
    args = parser.parse_args(argv)
    result = run(args.records, [int(s) for s in args.sizes.split(",")], args.heap, args.warm)
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = RESULTS_DIR / f"produce-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
