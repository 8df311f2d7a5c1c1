"""Ingest throughput of `plateau serve` against a plain Python consumer and kcat.

One run starts a local Apache Kafka broker (bridge.local_kafka, in a temporary folder, tied
to this process), creates an 8-partition topic and pre-fills it with `--records` records of
`--value-bytes` incompressible bytes (not timed), and a second topic of Arrow IPC messages
for the `format: arrow` case. Then every case reads its topic from offset 0 until it is
fully caught up, each in its own subprocess so that peak RSS and CPU seconds are its own:

- python: the Python ceiling, a plain confluent_kafka Consumer (own group, earliest,
  consume(num_messages=10000)) touching each message's value(), offset() and timestamp();
- kcat: `kcat -C -b B -t T -o beginning -e -q -c N > /dev/null`;
- plateau-1w, plateau-2w: `python -m bridge.cli --log-level WARNING serve --workers N`, raw
  format, fresh data_dir and group, until the manifest holds every record as sealed segments
  (the sum of next_offset over partitions equals the records produced); then SIGTERM;
- plateau-arrow-1w: `format: arrow`, messages of `--arrow-rows` rows each, reported in rows/s.

Wall time runs from process start to done (last record read, or last record sealed in the
manifest); startup is the time to the first record read or the first segment sealed. CPU is
the case's process tree (os.wait4: the child and every descendant it waited for); peak RSS is
the largest single process (ru_maxrss) and the largest sum over the process tree (sampled
from /proc every 50 ms). The broker's CPU during each case is reported beside it.

Then a profile of plateau serve with 1 worker: py-spy (if `--py-spy` or PATH has it) samples
the serving process, and `bench/ingest_probe.py stages` times the worker's per-message path
stage by stage in-process. Results go to bench/results/ingest-<timestamp>.json.

    .venv/bin/python bench/ingest_bench.py                     # 5M records, about 3 minutes
    .venv/bin/python bench/ingest_bench.py --records 500000 --repeat 1 --no-profile
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from ingest_ceiling import CLK_TCK, STEADY
from ingest_ceiling import thread_cpu as process_threads

from bridge.demo.producer import producer_config
from bridge.local_kafka import LocalKafka
from bridge.local_kafka.broker import BrokerSettings
from bridge.local_kafka.topics import create_topic
from bridge.logs import configure_logging
from plateau_core import Store

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
PROBE = BENCH_DIR / "ingest_probe.py"
CEILING = BENCH_DIR / "ingest_ceiling.py"
PYTHON = sys.executable
MB = 1_000_000
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
SAMPLE_S = 0.05
KCAT_INSTALL = "apt-get update && apt-get install -y kcat   (Debian/Ubuntu; brew install kcat)"


class BenchError(Exception):
    """The benchmark cannot run or a case did not do what it must."""


# --- processes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcStat:
    ppid: int
    cpu_s: float  # utime + stime + cutime + cstime (children it waited for)
    rss_bytes: int


def proc_stat(pid: int) -> ProcStat | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ProcStat(int(fields[1]), ticks / CLK_TCK, int(fields[21]) * PAGE_SIZE)


def process_tree(root: int) -> dict[int, ProcStat]:
    """`root` and all its live descendants."""
    stats: dict[int, ProcStat] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None:
                stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(stat.ppid, []).append(pid)
    tree: dict[int, ProcStat] = {}
    todo = [root] if root in stats else []
    while todo:
        pid = todo.pop()
        tree[pid] = stats[pid]
        todo.extend(children.get(pid, []))
    return tree


def cpu_of(pid: int | None) -> float:
    stat = None if pid is None else proc_stat(pid)
    return 0.0 if stat is None else stat.cpu_s


@dataclass
class ProcessRun:
    """What one measured subprocess did; times in seconds from its start."""

    started: float  # time.monotonic() just before it was started
    exit_code: int
    exit_s: float
    done_s: float | None
    cpu_s: float  # os.wait4 rusage: user + sys of the process and its waited-for descendants
    cpu_s_at_done: float | None  # /proc, the process tree at the moment it was done
    peak_rss_bytes: int  # ru_maxrss: the largest single process
    peak_tree_rss_bytes: int  # the largest sampled sum of RSS over the process tree
    broker_cpu_s: float
    stdout: str
    stderr_tail: str
    threads_at_done: list[dict[str, Any]] | None = None


def run_process(
    argv: list[str],
    *,
    log_path: Path,
    broker_pid: int | None,
    timeout_s: float,
    done: Callable[[], bool] | None = None,
    stdout_devnull: bool = False,
    on_start: Callable[[int], None] | None = None,
) -> ProcessRun:
    """Run argv to its end. With `done`, SIGTERM it once done() is true (polled every 50 ms)."""
    broker_cpu = cpu_of(broker_pid)
    stdout_path = log_path.with_suffix(".out")
    with log_path.open("wb") as err, stdout_path.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL if stdout_devnull else out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
        )
        if on_start is not None:
            on_start(proc.pid)
        seen: set[int] = set()
        peak_tree = 0
        done_s: float | None = None
        cpu_at_done: float | None = None
        threads_at_done: list[dict[str, Any]] | None = None
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                now = time.monotonic()
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    exit_s = now - started
                    break
                tree = process_tree(proc.pid)
                seen.update(tree)
                peak_tree = max(peak_tree, sum(s.rss_bytes for s in tree.values()))
                if done is not None and done_s is None and done():
                    done_s = time.monotonic() - started
                    cpu_at_done = sum(s.cpu_s for s in process_tree(proc.pid).values())
                    threads_at_done = thread_cpu(proc.pid)
                    proc.send_signal(signal.SIGTERM)
                if now - started > timeout_s:
                    raise BenchError(f"{argv[:6]} did not finish within {timeout_s:.0f}s")
                time.sleep(SAMPLE_S)
        finally:
            _kill_leftovers(proc, seen)
    broker_cpu = cpu_of(broker_pid) - broker_cpu
    stderr = log_path.read_text(errors="replace").splitlines()
    return ProcessRun(
        started=started,
        exit_code=proc.returncode,
        exit_s=exit_s,
        done_s=done_s,
        cpu_s=usage.ru_utime + usage.ru_stime,
        cpu_s_at_done=cpu_at_done,
        peak_rss_bytes=usage.ru_maxrss * 1024,
        peak_tree_rss_bytes=peak_tree,
        broker_cpu_s=broker_cpu,
        stdout=stdout_path.read_text(errors="replace"),
        stderr_tail="\n".join(stderr[-30:]),
        threads_at_done=threads_at_done,
    )


def _kill_leftovers(proc: subprocess.Popen[bytes], seen: set[int]) -> None:
    """Kill this case's processes that are still alive (a timeout, or an orphaned child)."""
    if proc.returncode is None:
        proc.kill()
        proc.wait(10)
    for pid in seen - {proc.pid}:
        if proc_stat(pid) is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- data --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    messages: int
    rows: int
    value_bytes: int
    produce_s: float


def _producer(bootstrap: str) -> tuple[Producer, list[str]]:
    failures: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None and len(failures) < 5:
            failures.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    config: dict[str, Any] = producer_config(bootstrap)
    config["delivery.report.only.error"] = True
    config["log_level"] = 3  # errors only: no "coordinator load in progress" retry notices
    config["on_delivery"] = delivered
    return Producer(config), failures


def _produce_all(
    bootstrap: str, topic: str, partitions: int, values: Iterator[bytes]
) -> tuple[int, int]:
    producer, failures = _producer(bootstrap)
    count = 0
    nbytes = 0
    for value in values:
        partition = count % partitions
        while True:
            try:
                producer.produce(topic, value, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        nbytes += len(value)
        if count % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise BenchError(f"records to {topic!r} not delivered within 300s")
    if failures:
        raise BenchError(f"delivery to {topic!r} failed: {'; '.join(failures)}")
    return count, nbytes


def raw_values(records: int, size: int, seed: int = 7) -> Iterator[bytes]:
    """`records` distinct, incompressible values of `size` bytes."""
    rng = random.Random(seed)
    chunk = 100_000
    for start in range(0, records, chunk):
        n = min(chunk, records - start)
        blob = rng.randbytes(n * size)
        for i in range(n):
            yield blob[i * size : (i + 1) * size]


def arrow_values(messages: int, rows: int) -> Iterator[bytes]:
    """Arrow IPC streams of `rows` rows: id int64, price float64, qty int32, ratio float32."""
    schema = pa.schema(
        [("id", pa.int64()), ("price", pa.float64()), ("qty", pa.int32()), ("ratio", pa.float32())]
    )
    for m in range(messages):
        price = pc.multiply(pc.random(rows), 100.0)
        batch = pa.record_batch(
            [
                pa.array(range(m * rows, (m + 1) * rows), pa.int64()),
                price,
                pc.floor(pc.multiply(pc.random(rows), 1000.0)).cast(pa.int32()),
                pc.random(rows).cast(pa.float32()),
            ],
            schema=schema,
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_batch(batch)
        yield sink.getvalue().to_pybytes()


def prefill(
    bootstrap: str, name: str, partitions: int, values: Iterator[bytes], rows_per_message: int
) -> Topic:
    create_topic(bootstrap, name, partitions)
    started = time.monotonic()
    count, nbytes = _produce_all(bootstrap, name, partitions, values)
    elapsed = time.monotonic() - started
    ends = end_offsets(bootstrap, name, partitions)
    if sum(ends.values()) != count:
        raise BenchError(f"{name}: end offsets {ends} do not add up to {count} produced")
    return Topic(name, partitions, count, count * rows_per_message, nbytes, elapsed)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex}"})
    try:
        return {
            p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1])
            for p in range(partitions)
        }
    finally:
        consumer.close()


# --- cases -------------------------------------------------------------------------------------


@dataclass
class CaseResult:
    case: str
    topic: str
    records: int  # Kafka records (messages)
    rows: int  # rows landed (= records, except for arrow)
    value_bytes: int
    wall_s: float  # process start -> done
    startup_s: float | None  # process start -> first record read / first segment sealed
    exit_s: float  # process start -> process exit (after SIGTERM for plateau)
    records_per_s: float
    rows_per_s: float
    value_mb_per_s: float
    cpu_s: float
    cpu_s_at_done: float | None
    cores_used: float | None  # cpu_s_at_done / wall_s
    peak_rss_mb: float
    peak_tree_rss_mb: float
    broker_cpu_s: float
    # The window from 10% to 90% of the records read (python) or sealed (plateau): the rate
    # without start-up and tail, and how many cores the case, its consumer main threads and
    # the broker used meanwhile.
    steady_records_per_s: float | None = None
    steady_cores: float | None = None
    steady_main_thread_cores: float | None = None
    steady_broker_cores: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _result(
    case: str, topic: Topic, run: ProcessRun, wall: float, startup: float | None
) -> CaseResult:
    cpu_at_done = run.cpu_s_at_done
    return CaseResult(
        case=case,
        topic=topic.name,
        records=topic.messages,
        rows=topic.rows,
        value_bytes=topic.value_bytes,
        wall_s=round(wall, 3),
        startup_s=None if startup is None else round(startup, 3),
        exit_s=round(run.exit_s, 3),
        records_per_s=round(topic.messages / wall),
        rows_per_s=round(topic.rows / wall),
        value_mb_per_s=round(topic.value_bytes / wall / MB, 2),
        cpu_s=round(run.cpu_s, 2),
        cpu_s_at_done=None if cpu_at_done is None else round(cpu_at_done, 2),
        cores_used=None if cpu_at_done is None else round(cpu_at_done / wall, 2),
        peak_rss_mb=round(run.peak_rss_bytes / MB, 1),
        peak_tree_rss_mb=round(run.peak_tree_rss_bytes / MB, 1),
        broker_cpu_s=round(run.broker_cpu_s, 2),
    )


@dataclass(frozen=True)
class Snapshot:
    """Clock and CPU counters at one moment of a case."""

    t: float
    cpu_s: float  # the case's process tree
    main_s: float  # main threads of its consumer processes
    broker_s: float


def snapshot(pid: int | None, broker_pid: int | None) -> Snapshot:
    t = time.monotonic()
    if pid is None:
        return Snapshot(t, 0.0, 0.0, cpu_of(broker_pid))
    cpu = sum(s.cpu_s for s in process_tree(pid).values())
    main = sum(
        p["cpu_s"].get("main thread", 0.0)
        for p in thread_cpu(pid)
        if any(k.startswith("rdk:") for k in p["cpu_s"])
    )
    return Snapshot(t, cpu, main, cpu_of(broker_pid))


def apply_steady(result: CaseResult, start: Snapshot | None, end: Snapshot | None) -> None:
    if start is None or end is None or end.t <= start.t:
        return
    span = end.t - start.t
    fraction = STEADY[1] - STEADY[0]
    result.steady_records_per_s = round(fraction * result.records / span)
    result.steady_cores = round((end.cpu_s - start.cpu_s) / span, 2)
    result.steady_main_thread_cores = round((end.main_s - start.main_s) / span, 2)
    result.steady_broker_cores = round((end.broker_s - start.broker_s) / span, 2)
    result.extra["steady_window_s"] = round(span, 3)
    if result.rows != result.records:
        result.extra["steady_rows_per_s"] = round(fraction * result.rows / span)


def _failed(case: str, run: ProcessRun) -> BenchError:
    return BenchError(f"{case} exited with {run.exit_code}:\n{run.stderr_tail}")


def run_reporting(
    ctx: Context, case: str, argv: list[str], expected: int
) -> tuple[ProcessRun, dict[str, Any]]:
    """Run a case that prints one JSON line at the end (its report) and check its count."""
    run = run_process(
        argv,
        log_path=ctx.work / f"{case}.log",
        broker_pid=ctx.broker_pid,
        timeout_s=ctx.timeout_s,
    )
    if run.exit_code != 0:
        raise _failed(case, run)
    report: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    if report["records"] != expected:
        raise BenchError(f"{case} handled {report['records']} of {expected} records")
    return run, report


def case_python(ctx: Context, topic: Topic, tier: Tier) -> CaseResult:
    case = tier.case("python")
    group = f"bench-{case}-{uuid.uuid4().hex[:8]}"
    argv = [PYTHON, str(CEILING), "--bootstrap", ctx.bootstrap, "--topic", topic.name]
    argv += ["--expected", str(topic.messages), "--group", group]
    argv += ["--broker-pid", str(ctx.broker_pid or 0)]
    for key, value in tier.properties.items():
        argv += ["--property", f"{key}={value}"]
    run, report = run_reporting(ctx, case, argv, topic.messages)
    run.cpu_s_at_done = report["cpu_s_at_done"]
    result = _result(
        case,
        topic,
        run,
        report["done"] - run.started,
        report["first_record"] - run.started,
    )
    steady = [Snapshot(**report["steady"][k]) if report["steady"].get(k) else None for k in "ab"]
    apply_steady(result, steady[0], steady[1])
    result.extra["child_main_started_s"] = round(report["started"] - run.started, 3)
    result.extra["thread_cpu_s_at_done"] = report["thread_cpu_s"]
    result.extra["gc"] = report["gc"]
    return result


def case_kcat(ctx: Context, topic: Topic) -> CaseResult:
    kcat = require_kcat()
    argv = [kcat, "-C", "-b", ctx.bootstrap, "-t", topic.name, "-o", "beginning", "-e", "-q"]
    argv += ["-c", str(topic.messages)]
    run = run_process(
        argv,
        log_path=ctx.work / "kcat.log",
        broker_pid=ctx.broker_pid,
        timeout_s=ctx.timeout_s,
        stdout_devnull=True,
    )
    if run.exit_code != 0:
        raise _failed("kcat", run)
    run.cpu_s_at_done = run.cpu_s
    return _result("kcat", topic, run, run.exit_s, None)


class ManifestWatch:
    """Polls the manifest of a serve run: when the first segment landed, when all did."""

    def __init__(self, data_dir: Path, topic: Topic, broker_pid: int | None) -> None:
        self.store = Store.open(data_dir)  # created here, before serve opens it
        self.topic = topic
        self.broker_pid = broker_pid
        self.pid: int | None = None
        self.first_sealed_at: float | None = None
        self.steady: list[Snapshot] = []
        self.segments = 0
        self.records = 0

    def __call__(self) -> bool:
        spans = self.store.spans(self.topic.name)
        next_offsets = sum(s.next_offset for s in spans)
        if next_offsets and self.first_sealed_at is None:
            self.first_sealed_at = time.monotonic()
        while (
            len(self.steady) < len(STEADY)
            and next_offsets >= STEADY[len(self.steady)] * self.topic.messages
        ):
            self.steady.append(snapshot(self.pid, self.broker_pid))
        if next_offsets < self.topic.messages:
            return False
        self.segments = sum(s.segments for s in spans)
        self.records = sum(s.records for s in spans)
        return True


def serve_config(
    ctx: Context, topic: Topic, fmt: str, data_dir: Path, group: str, tier: Tier
) -> Path:
    config = {
        "kafka": {"bootstrap_servers": ctx.bootstrap, "group_id": group, **tier.properties},
        "storage": {"data_dir": str(data_dir)},
        "defaults": {"roll": {"max_age": ctx.max_age}},
        "topics": [{"source": topic.name, "format": fmt}],
        "shutdown_timeout": "60s",
        "metrics": {"listen": "127.0.0.1:0"},  # runs never collide over a port
    }
    path = data_dir.with_suffix(".yaml")
    path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
    return path


def run_serve(
    ctx: Context,
    topic: Topic,
    fmt: str,
    workers: int,
    name: str,
    tier: Tier,
    on_start: Callable[[int], None] | None = None,
) -> CaseResult:
    case = tier.case(name)
    data_dir = ctx.work / f"{case}-data"
    shutil.rmtree(data_dir, ignore_errors=True)
    group = f"bench-{case}-{uuid.uuid4().hex[:8]}"
    config = serve_config(ctx, topic, fmt, data_dir, group, tier)
    argv = [PYTHON, "-m", "bridge.cli", "--log-level", "WARNING", "serve"]
    argv += ["--config", str(config), "--workers", str(workers)]
    watch = ManifestWatch(data_dir, topic, ctx.broker_pid)

    def started(pid: int) -> None:
        watch.pid = pid
        if on_start is not None:
            on_start(pid)

    try:
        run = run_process(
            argv,
            log_path=ctx.work / f"{case}.log",
            broker_pid=ctx.broker_pid,
            timeout_s=ctx.timeout_s,
            done=watch,
            on_start=started,
        )
    finally:
        watch.store.close()
    if run.exit_code != 0 or run.done_s is None:
        raise _failed(case, run)
    if watch.records != topic.rows:
        raise BenchError(f"{case}: the manifest holds {watch.records} rows, not {topic.rows}")
    first = watch.first_sealed_at
    result = _result(case, topic, run, run.done_s, None if first is None else first - run.started)
    if len(watch.steady) == len(STEADY):
        apply_steady(result, watch.steady[0], watch.steady[1])
    result.extra.update(
        segments=watch.segments,
        shutdown_s=round(run.exit_s - run.done_s, 3),
        thread_cpu_s_at_done=run.threads_at_done,
        store_bytes=sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file()),
    )
    shutil.rmtree(data_dir, ignore_errors=True)
    return result


# --- profile -----------------------------------------------------------------------------------

_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^:()]+)(?::(?P<line>\d+))?\)$")

# Buckets of the worker thread's samples: walking each stack from the leaf up, the first frame
# that matches a rule (function, file prefix, text on the frame's source line) decides.
_RULES: list[tuple[str, str, str, str]] = [
    ("consumer.consume()", "run", "bridge/consume/worker.py", "consumer.consume("),
    ("status file write", "write", "bridge/ops/worker_status.py", ""),
    ("_commit_sealed", "commit_sealed", "bridge/consume/commits.py", ""),
    ("_resume_ready", "resume_ready", "bridge/consume/pauses.py", ""),
    ("decode: timestamp column", "kafka_timestamps", "bridge/consume/messages.py", ""),
    ("decode: headers column", "header_array", "bridge/consume/messages.py", ""),
    ("decode: offset column", "records_of", "bridge/consume/messages.py", "Message.offset"),
    ("decode: key column", "records_of", "bridge/consume/messages.py", "Message.key"),
    ("decode: value column", "records_of", "bridge/consume/messages.py", "Message.value"),
    ("decode: envelope batch", "envelope", "bridge/ingest/records.py", ""),
    ("decode: RecordBatch.from_pydict", "decode", "bridge/ingest/decode/raw.py", "from_pydict"),
    ("decode: other", "", "bridge/ingest/", ""),
    ("decode: other", "", "bridge/consume/messages.py", ""),
    ("writer.append: normalize_batch", "normalize_batch", "plateau_core/schema.py", ""),
    ("writer.append: other", "append", "plateau_core/writer.py", ""),
    ("_land: other (next offset, stats)", "land", "bridge/consume/landing.py", ""),
    ("_ingest: group by partition", "by_partition", "bridge/consume/batches.py", ""),
    ("_ingest: error check", "_without_errors", "bridge/consume/worker.py", ""),
    ("_ingest: fresh-offset check", "_ingest", "bridge/consume/worker.py", ""),
    ("worker loop: other", "run", "bridge/consume/worker.py", ""),
]


@dataclass(frozen=True)
class Frame:
    func: str  # bare function name (py-spy writes Class.method)
    file: str  # relative to the repository or site-packages
    line: int

    @classmethod
    def parse(cls, text: str) -> Frame:
        match = _FRAME.match(text)
        if match is None:
            return cls(text, "", 0)
        file = match["file"]
        for marker in ("/bridge/", "/plateau_core/", "/site-packages/"):
            if marker in file:
                file = file[file.index(marker) + 1 :]
                break
        return cls(match["func"].rsplit(".", 1)[-1], file, int(match["line"] or 0))

    def describe(self) -> str:
        return f"{self.func} ({self.file}:{self.line}) {_source_line(self)}"[:150]


_SOURCES: dict[str, list[str]] = {}


def _source_line(frame: Frame) -> str:
    if frame.file not in _SOURCES:
        path = REPO / frame.file
        _SOURCES[frame.file] = path.read_text().splitlines() if path.is_file() else []
    lines = _SOURCES[frame.file]
    return lines[frame.line - 1].strip() if 0 < frame.line <= len(lines) else ""


def _bucket(frames: list[Frame]) -> str:
    """Specific rules (naming a function) first, from the leaf up; then the catch-alls.
    Comprehension frames (<listcomp>, <genexpr>) belong to the line of their parent."""
    named = [f for f in reversed(frames) if not f.func.startswith("<")]
    for specific in (True, False):
        for frame in named:
            for label, func, file, hint in _RULES:
                if (
                    bool(func) == specific
                    and (not func or frame.func == func)
                    and frame.file.startswith(file)
                    and (not hint or hint in _source_line(frame))
                ):
                    return label
    return "other"


def analyse_pyspy(path: Path) -> dict[str, Any]:
    """Split the main thread's samples (py-spy raw format, --threads --idle) into buckets.

    With --idle every sample counts, also those where the thread waits (inside consume()
    for the broker, or for a lock), so the shares are shares of the main thread's wall time.
    """
    threads: Counter[str] = Counter()
    buckets: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    main_total = 0
    in_loop = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        parts = stack.split(";")
        thread = next((p for p in parts if p.startswith("thread ")), "thread ?")
        name = thread.partition(": ")[2] or thread
        threads[re.sub(r"_\d+$", "_*", name)] += count
        if name != "MainThread":
            continue
        main_total += count
        frames = [Frame.parse(p) for p in parts if not p.startswith(("thread ", "process "))]
        if not any(f.func == "run" and f.file == "bridge/consume/worker.py" for f in frames):
            buckets["outside Worker.run (imports, start-up, shutdown)"] += count
            continue
        in_loop += count
        buckets[_bucket(frames)] += count
        leaves[frames[-1].describe()] += count

    def pct(counter: Counter[str], total: int, top: int | None = None) -> dict[str, float]:
        return {k: round(100 * v / max(1, total), 1) for k, v in counter.most_common(top)}

    loop_buckets = Counter({k: v for k, v in buckets.items() if not k.startswith("outside")})
    return {
        "samples_by_thread": dict(threads.most_common()),
        "main_thread_samples": main_total,
        "worker_loop_samples": in_loop,
        "main_thread_pct": pct(buckets, main_total),
        "worker_loop_pct": pct(loop_buckets, in_loop),
        "worker_loop_top_leaves_pct": pct(leaves, in_loop, 25),
    }


def thread_cpu(root: int) -> list[dict[str, Any]]:
    """CPU seconds of every thread of every process in the tree, grouped per process:
    the main thread, librdkafka's threads (rdk:*) and the other (Python, Arrow) threads."""
    out = []
    for pid in sorted(process_tree(root)):
        try:
            threads = len(list(Path(f"/proc/{pid}/task").iterdir()))
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        out.append(
            {"pid": pid, "cmd": cmdline[:120], "threads": threads, "cpu_s": process_threads(pid)}
        )
    return out


def run_probe(ctx: Context, tier: Tier, what: str, argv: list[str]) -> dict[str, Any]:
    """bench/ingest_probe.py with `argv` (and the tier's consumer properties); its JSON."""
    full = [PYTHON, str(PROBE), *argv, "--bootstrap", ctx.bootstrap]
    for key, value in tier.properties.items():
        full += ["--property", f"{key}={value}"]
    log_path = ctx.work / f"{what.replace(' ', '-')}.log"
    run = run_process(full, log_path=log_path, broker_pid=ctx.broker_pid, timeout_s=600)
    if run.exit_code != 0:
        raise _failed(what, run)
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def profile(ctx: Context, topic: Topic, py_spy: str | None, tier: Tier) -> dict[str, Any]:
    out: dict[str, Any] = {"tier": tier.name, "properties": tier.properties}
    if py_spy is not None:
        raw = ctx.results_dir / f"ingest-{ctx.stamp}-pyspy.txt"
        spy: list[subprocess.Popen[bytes]] = []

        def attach(pid: int) -> None:
            cmd = [py_spy, "record", "--pid", str(pid), "--rate", "100", "--idle", "--threads"]
            cmd += ["--nonblocking"]  # pausing the process for every sample slows it down 5-8x
            cmd += ["--format", "raw", "--output", str(raw)]
            spy.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        try:
            result = run_serve(ctx, topic, "raw", 1, "profile-1w", tier, on_start=attach)
        finally:
            for p in spy:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        out["pyspy_run"] = asdict(result)
        if raw.exists():
            out["pyspy"] = analyse_pyspy(raw)
            out["pyspy"]["collapsed_stacks"] = str(raw.relative_to(REPO))
        else:
            out["pyspy"] = {"error": "py-spy wrote no profile (is ptrace allowed?)"}
    else:
        out["pyspy"] = {"skipped": "py-spy not found; pip install py-spy, then --py-spy PATH"}
    records = min(topic.messages, ctx.stage_records)
    data_dir = ctx.work / "stages-data"
    argv = ["stages", "--topic", topic.name, "--group", f"bench-stages-{uuid.uuid4().hex[:8]}"]
    argv += ["--records", str(records), "--data-dir", str(data_dir)]
    argv += ["--max-age", str(parse_duration(ctx.max_age))]
    try:
        out["stages"] = run_probe(ctx, tier, "stages", argv)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    for gc_default in (True, False):
        data_dir = ctx.work / "inprocess-data"
        argv = ["worker", "--topic", topic.name, "--group", f"bench-inproc-{uuid.uuid4().hex[:8]}"]
        argv += ["--expected", str(topic.messages), "--max-age", ctx.max_age]
        argv += ["--data-dir", str(data_dir)] + (["--gc-default"] if gc_default else [])
        key = "inprocess_worker_gc_default" if gc_default else "inprocess_worker"
        try:
            out[key] = run_probe(ctx, tier, "in-process worker", argv)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    return out


def parse_duration(text: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0}
    for unit in ("ms", "s", "m"):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * units[unit]
    return float(text)


# --- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tier:
    """librdkafka consumer settings shared by the python and plateau cases of one tier."""

    name: str
    properties: dict[str, str]

    def case(self, base: str) -> str:
        return base if self.name == "default" else f"{base}-{self.name}"


def parse_properties(text: str) -> dict[str, str]:
    pairs = [p.partition("=") for p in text.split(",") if p.strip()]
    return {k.strip(): v.strip() for k, _, v in pairs}


@dataclass
class Context:
    bootstrap: str
    broker_pid: int | None
    work: Path
    results_dir: Path
    stamp: str
    max_age: str
    timeout_s: float
    stage_records: int


def require_kcat() -> str:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        raise BenchError(f"kcat is not on PATH; install it first:\n    {KCAT_INSTALL}")
    return kcat


def _version(cmd: list[str], pattern: str) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(pattern, done.stdout + done.stderr)
    return match.group(1) if match else None


def machine_info(kafka_version: str, py_spy: str | None) -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text()
    ram_kb = int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1))  # type: ignore[union-attr]
    cpu = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
    revision = _version(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], r"(\w+)")
    dirty = _version(["git", "-C", str(REPO), "status", "--porcelain"], r"(\S)")
    return {
        "revision": revision,
        "worktree_dirty": dirty is not None,
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu.group(1).strip() if cpu else platform.processor(),
        "ram_bytes": ram_kb * 1024,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "confluent_kafka": metadata.version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "pyarrow": pa.__version__,
        "plateau": metadata.version("plateau"),
        "kafka": kafka_version,
        "java": _version(["java", "-version"], r'version "([^"]+)"'),
        "kcat": _version([require_kcat(), "-V"], r"Version (\S+ \(.*librdkafka \S+)"),
        "py_spy": None if py_spy is None else _version([py_spy, "--version"], r"py-spy (\S+)"),
    }


def portable(text: str, work: Path) -> str:
    """Results name paths relative to the repository and the temporary folder as <work>,
    so that a results file says nothing about the machine's layout."""
    return text.replace(str(work), "<work>").replace(f"{REPO}/", "")


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


def summarise(cases: list[CaseResult], tiers: list[Tier]) -> dict[str, Any]:
    """Median of each case's repeats, then the ratios against the targets, per tier."""
    by_case: dict[str, list[CaseResult]] = {}
    for case in cases:
        by_case.setdefault(case.case, []).append(case)
    medians: dict[str, dict[str, Any]] = {
        name: {
            "repeats": len(runs),
            "wall_s": statistics.median(r.wall_s for r in runs),
            "records_per_s": round(statistics.median(r.records_per_s for r in runs)),
            "rows_per_s": round(statistics.median(r.rows_per_s for r in runs)),
            "value_mb_per_s": round(statistics.median(r.value_mb_per_s for r in runs), 2),
            "startup_s": _median_or_none([r.startup_s for r in runs]),
            "cpu_s_at_done": _median_or_none([r.cpu_s_at_done for r in runs]),
            "cores_used": _median_or_none([r.cores_used for r in runs]),
            "peak_rss_mb": max(r.peak_rss_mb for r in runs),
            "peak_tree_rss_mb": max(r.peak_tree_rss_mb for r in runs),
            "broker_cpu_s": statistics.median(r.broker_cpu_s for r in runs),
            "records_per_s_all": [r.records_per_s for r in runs],
            "steady_records_per_s": _median_or_none([r.steady_records_per_s for r in runs]),
            "steady_cores": _median_or_none([r.steady_cores for r in runs]),
            "steady_main_thread_cores": _median_or_none([r.steady_main_thread_cores for r in runs]),
            "steady_broker_cores": _median_or_none([r.steady_broker_cores for r in runs]),
            "shutdown_s_all": [r.extra.get("shutdown_s") for r in runs],
        }
        for name, runs in by_case.items()
    }
    ratios: dict[str, Any] = {}
    for metric in ("records_per_s", "steady_records_per_s"):
        rate = {name: m[metric] for name, m in medians.items() if m[metric]}
        for tier in tiers:
            py = rate.get(tier.case("python"))
            if py is None:
                continue
            for workers, target in ((1, 0.8), (2, 1.0)):
                plateau = rate.get(tier.case(f"plateau-{workers}w"))
                if plateau is not None:
                    name = f"{tier.case(f'plateau-{workers}w')} / {tier.case('python')}"
                    ratios.setdefault(name, {"target": target})[metric] = {
                        "ratio": ratio(plateau, py),
                        "met": plateau >= target * py,
                    }
            if "kcat" in rate:
                name = f"{tier.case('python')} / kcat"
                ratios.setdefault(name, {})[metric] = {"ratio": ratio(py, rate["kcat"])}
    return {"cases": medians, "ratios": ratios}


def _median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


@contextmanager
def broker(work: Path, heap: str) -> Iterator[LocalKafka]:
    kafka = LocalKafka(work / "kafka", BrokerSettings(heap=heap), tie_to_parent=True)
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--value-bytes", type=int, default=128)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--arrow-messages", type=int, default=5_000, help="0: no arrow case")
    parser.add_argument("--arrow-rows", type=int, default=1_000)
    parser.add_argument("--workers", default="1,2", help="plateau serve --workers to run")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each case (median)")
    parser.add_argument(
        "--tuned",
        default="fetch.queue.backoff.ms=10",
        help="librdkafka consumer properties of the 'tuned' tier (k=v,k=v); empty: no tier",
    )
    parser.add_argument(
        "--profile-tier", choices=("default", "tuned"), default="tuned", help="tier to profile"
    )
    parser.add_argument("--max-age", default="1s", help="roll.max_age of the serve runs")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--py-spy", default=shutil.which("py-spy"), help="py-spy executable")
    parser.add_argument("--stage-records", type=int, default=1_000_000)
    parser.add_argument("--broker-heap", default="1g")
    parser.add_argument("--timeout", type=float, default=600.0, help="per case, seconds")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temp folder")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    try:
        require_kcat()
        workers = [int(w) for w in args.workers.split(",") if w]
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="plateau-ingest-", dir=args.work_dir) as tmp:
            work = Path(tmp)
            payload = run_all(args, work, workers, stamp)
    except BenchError as exc:
        print(f"ingest_bench: {exc}", file=sys.stderr)
        return 2
    path = RESULTS_DIR / f"ingest-{stamp}.json"
    path.write_text(portable(json.dumps(payload, indent=2), work) + "\n")
    print_summary(payload)
    print(f"results: {path.relative_to(REPO)}")
    return 0


def run_all(args: argparse.Namespace, work: Path, workers: list[int], stamp: str) -> dict[str, Any]:
    with broker(work, args.broker_heap) as kafka:
        bootstrap = kafka.bootstrap_servers
        ctx = Context(
            bootstrap=bootstrap,
            broker_pid=kafka.pid,
            work=work,
            results_dir=RESULTS_DIR,
            stamp=stamp,
            max_age=args.max_age,
            timeout_s=args.timeout,
            stage_records=args.stage_records,
        )
        machine = machine_info(kafka.settings.kafka_version, args.py_spy)
        print(f"broker {bootstrap}; pre-filling {args.records:,} records ...", flush=True)
        raw = prefill(
            bootstrap,
            "ingest-raw",
            args.partitions,
            raw_values(args.records, args.value_bytes),
            1,
        )
        arrow = None
        if args.arrow_messages:
            arrow = prefill(
                bootstrap,
                "ingest-arrow",
                args.partitions,
                arrow_values(args.arrow_messages, args.arrow_rows),
                args.arrow_rows,
            )
        print(f"pre-filled in {raw.produce_s:.1f}s; running cases ...", flush=True)
        tiers = [Tier("default", {})]
        if args.tuned:
            tiers.append(Tier("tuned", parse_properties(args.tuned)))
        cases: list[CaseResult] = []
        for _ in range(args.repeat):
            cases.append(_show(case_kcat(ctx, raw)))
            for tier in tiers:
                cases.append(_show(case_python(ctx, raw, tier)))
                for n in workers:
                    cases.append(_show(run_serve(ctx, raw, "raw", n, f"plateau-{n}w", tier)))
                if arrow is not None and tier.name == "default":
                    cases.append(_show(run_serve(ctx, arrow, "arrow", 1, "plateau-arrow-1w", tier)))
        profiled = None
        if not args.no_profile:
            tier = next((t for t in tiers if t.name == args.profile_tier), tiers[0])
            print(f"profiling plateau serve --workers 1 ({tier.name}) ...", flush=True)
            profiled = profile(ctx, raw, args.py_spy, tier)
    return {
        "benchmark": "ingest",
        "timestamp": stamp,
        "machine": machine,
        "settings": {
            "records": args.records,
            "value_bytes": args.value_bytes,
            "partitions": args.partitions,
            "arrow_messages": args.arrow_messages,
            "arrow_rows": args.arrow_rows,
            "repeat": args.repeat,
            "roll_max_age": args.max_age,
            "broker_heap": args.broker_heap,
            "tiers": {t.name: t.properties for t in tiers},
            "producer": "bridge.demo.producer.producer_config (lz4, linger 5 ms), round-robin",
        },
        "topics": [asdict(t) for t in (raw, arrow) if t is not None],
        "summary": summarise(cases, tiers),
        "runs": [asdict(c) for c in cases],
        "profile": profiled,
    }


def _show(result: CaseResult) -> CaseResult:
    print(
        f"  {result.case:<23} {result.wall_s:7.2f}s  {result.records_per_s:>10,} rec/s  "
        f"{result.rows_per_s:>10,} rows/s  {result.value_mb_per_s:7.1f} MB/s  "
        f"cpu {result.cpu_s_at_done or result.cpu_s:6.1f}s  rss {result.peak_tree_rss_mb:6.0f} MB  "
        f"startup {result.startup_s if result.startup_s is not None else '-'}s  "
        f"steady {result.steady_records_per_s or 0:>10,.0f} rec/s "
        f"main {result.steady_main_thread_cores or 0:.2f} cores",
        flush=True,
    )
    return result


def print_summary(payload: dict[str, Any]) -> None:
    summary = payload["summary"]
    for name, info in summary["ratios"].items():
        target = info.get("target")
        parts = []
        for metric, label in (("records_per_s", "end-to-end"), ("steady_records_per_s", "steady")):
            if metric in info:
                verdict = "" if target is None else (" met" if info[metric]["met"] else " MISSED")
                parts.append(f"{label} {info[metric]['ratio']}{verdict}")
        print(f"{name}: {', '.join(parts)}" + ("" if target is None else f" (target {target})"))
    prof = payload.get("profile") or {}
    buckets = (prof.get("pyspy") or {}).get("worker_loop_pct")
    if buckets:
        print(f"worker loop, main thread ({prof['tier']} tier; py-spy, % of samples):")
        for name, pct in buckets.items():
            print(f"  {pct:5.1f}%  {name}")


if __name__ == "__main__":
    sys.exit(main())
