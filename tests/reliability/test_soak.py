"""A bounded soak: a steady load on 8 partitions with retention keeping the store small.

RSS, open files and threads of the serve process stay flat, the store stays within its
max_bytes (plus one segment) the whole time, the manifest does not grow without bound, and
every offset is either stored exactly once or was retired by retention oldest-first.
10 minutes with PLATEAU_RELIABILITY=full, 60 s otherwise.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from bridge.demo.producer import producer_config
from plateau_core import SegmentState, Store
from tests.bridge_support import end_offsets, wait_landed
from tests.reliability.processes import ServeProcess, retired_events, retired_prefix
from tests.reliability.support import Recorder, every_offset, scale

MiB = 1024 * 1024
# Small enough that retention runs within the first third of the short run.
MAX_BYTES = scale(8, 64) * MiB
SEGMENT_BYTES = 1 * MiB
RATE = 4_000  # records per second, ~200 bytes each
PARTITIONS = 8


@dataclass(frozen=True)
class Sample:
    at: float
    rss: int
    fds: int
    threads: int
    footprint: int  # readable segments + manifest files, what retention keeps under max_bytes
    on_disk: int  # every file under data_dir (retired segments wait out the grace period)
    manifest_rows: int
    largest_segment: int
    manifest_bytes: int


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _bytes(paths: Iterable[Path]) -> int:
    """Sizes of the files among `paths` that still exist: serve renames its temp files and
    retention removes segments while the walk runs."""
    total = 0
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            if path.is_file():
                total += path.stat().st_size
    return total


def _sample(pid: int, data_dir: Path, started: float) -> Sample:
    status = _proc_status(pid)
    with Store.open(data_dir) as store:
        footprint = store.footprint_bytes()
        rows = store.manifest.segments(states=tuple(SegmentState))
    on_disk = _bytes(data_dir.rglob("*"))
    return Sample(
        at=time.monotonic() - started,
        rss=int(status["VmRSS"].split()[0]) * 1024,
        fds=sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir()),
        threads=int(status["Threads"]),
        footprint=footprint,
        on_disk=on_disk,
        manifest_rows=len(rows),
        largest_segment=max((r.size_bytes for r in rows), default=0),
        manifest_bytes=_bytes(data_dir.glob("manifest.db*")),
    )


class Load(threading.Thread):
    """RATE records a second, spread over the partitions by key, until stopped."""

    def __init__(self, bootstrap: str, topic: str, seconds: float) -> None:
        super().__init__(name="soak-load", daemon=True)
        self.bootstrap, self.topic, self.seconds = bootstrap, topic, seconds
        self.produced = 0
        self.errors: list[str] = []

    def run(self) -> None:
        producer = Producer(producer_config(self.bootstrap))
        # Incompressible values, so the store fills at the rate records arrive.
        pool = os.urandom(MiB + 200)
        started = time.monotonic()
        tick = 0.1
        while (elapsed := time.monotonic() - started) < self.seconds:
            due = int(elapsed * RATE) + int(RATE * tick)
            while self.produced < due:
                try:
                    producer.produce(
                        self.topic,
                        key=str(self.produced).encode(),
                        value=pool[(cut := self.produced * 181 % MiB) : cut + 180],
                        on_delivery=self._report,
                    )
                    self.produced += 1
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            time.sleep(tick)
        if producer.flush(60):
            self.errors.append("records still queued 60 s after the load ended")

    def _report(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))


def _flat(values: list[int], *, slack: float, absolute: int) -> bool:
    """The second half's median is within `slack` (relative) + `absolute` of the first's."""
    half = len(values) // 2
    first, second = statistics.median(values[:half]), statistics.median(values[half:])
    return second <= first * (1 + slack) + absolute


SECONDS = scale(60, 600)


@pytest.mark.timeout(SECONDS + 300)
def test_soak_steady_load_with_retention(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, reliability: Recorder
) -> None:
    seconds = SECONDS
    topic = topic_factory(partitions=PARTITIONS)
    data_dir = tmp_path / "data"
    config = {
        "kafka": {"bootstrap_servers": kafka, "group_id": f"g-{topic}"},
        "storage": {
            "data_dir": str(data_dir),
            "max_bytes": MAX_BYTES,
            "retention_interval": "1s",
            "deletion_grace": "2s",
        },
        "defaults": {"roll": {"max_bytes": SEGMENT_BYTES, "max_age": "2s"}},
        "topics": [{"source": topic}],
        "shutdown_timeout": "20s",
        "metrics": {"listen": "127.0.0.1:0"},
    }
    serve = ServeProcess(config, tmp_path)
    samples: list[Sample] = []
    load = Load(kafka, topic, seconds)
    try:
        serve.wait_event("partition_assigned")
        started = time.monotonic()
        load.start()
        while load.is_alive():
            assert serve.process.poll() is None, serve.log_path.read_text()[-3000:]
            samples.append(_sample(serve.process.pid, data_dir, started))
            time.sleep(2)
        load.join()
        assert load.errors == []
        ends = end_offsets(kafka, topic)
        wait_landed(data_dir, topic, ends, timeout_s=120)
        samples.append(_sample(serve.process.pid, data_dir, started))
    finally:
        code = serve.stop()
    assert code == 0, serve.log_path.read_text()[-3000:]
    # Warm-up: the first third (buffers, caches and the store filling up to max_bytes).
    steady = samples[len(samples) // 3 :]
    largest = max(s.largest_segment for s in samples)
    # Retention looks every 0.1 s and retires within tens of milliseconds of a seal, but
    # partitions that roll together (same rate, same max_age) seal in the same instant:
    # for that moment the store holds up to one new segment per partition above max_bytes.
    over = [s for s in samples if s.footprint > MAX_BYTES + PARTITIONS * largest]
    starts = retired_prefix(retired_events(serve), ends)
    details = {
        "seconds": seconds,
        "rate": RATE,
        "partitions": PARTITIONS,
        "max_bytes": MAX_BYTES,
        "footprint_max": max(s.footprint for s in samples),
        "samples_above_max_bytes_plus_one_segment": sum(
            1 for s in samples if s.footprint > MAX_BYTES + largest
        ),
        "on_disk_max": max(s.on_disk for s in samples),
        "largest_segment": largest,
        "rss_mb_first_last_max": [
            round(steady[0].rss / MiB),
            round(samples[-1].rss / MiB),
            round(max(s.rss for s in steady) / MiB),
        ],
        "fds_min_max": [min(s.fds for s in steady), max(s.fds for s in steady)],
        "threads_min_max": [min(s.threads for s in steady), max(s.threads for s in steady)],
        "manifest_rows_max": max(s.manifest_rows for s in samples),
        "manifest_bytes_max": max(s.manifest_bytes for s in samples),
        "retired_records": sum(starts.values()),
        "samples": len(samples),
    }
    problems = {
        "store above max_bytes + one segment per partition": len(over),
        "retention never ran": int(sum(starts.values()) == 0),
        "RSS grew": int(not _flat([s.rss for s in steady], slack=0.15, absolute=40 * MiB)),
        "open files grew": int(max(s.fds for s in steady) - min(s.fds for s in steady) > 16),
        "threads grew": int(max(s.threads for s in steady) - min(s.threads for s in steady) > 4),
        # Retention keeps the row count bounded by what fits in max_bytes.
        "manifest grew": int(not _flat([s.manifest_rows for s in steady], slack=0.25, absolute=8)),
    }
    failed = [name for name, bad in problems.items() if bad]
    reliability.check(
        "Soak with retention",
        f"{seconds} s at {RATE:,} records/s on {PARTITIONS} partitions, max_bytes "
        f"{MAX_BYTES // MiB} MiB, segments up to {SEGMENT_BYTES // MiB} MiB",
        data_dir,
        topic,
        every_offset(ends, starts),
        produced=load.produced,
        outcome="FAILED: " + ", ".join(failed)
        if failed
        else "exactly once (oldest retired); RSS, files, threads, manifest flat",
        **details,
    )
    assert failed == [], (failed, details, over[:3])
