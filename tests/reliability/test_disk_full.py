"""The disk fills up. On a real small filesystem (tmpfs, where the machine lets the suite
mount one) plateau's own process hits ENOSPC; everywhere, an injected ENOSPC at the
segment-write boundary does the same in-process. plateau pauses consumption, keeps what it
has, and resumes when space returns or retention frees it."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from bridge.demo.producer import Record, produce
from plateau_core import Store
from plateau_core.policies import IndexPolicy
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats
from tests.bridge_support import end_offsets, make_config, serving, wait_landed
from tests.reliability.processes import ServeProcess, retired_events, retired_prefix
from tests.reliability.support import Recorder, every_offset
from tests.support import writers_write_with

MiB = 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs of its own; skipped where mounting is not permitted (not root), in
    which case the injected-ENOSPC test below covers the same path."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); injected ENOSPC only")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _records(prefix: str, count: int, size: int = 1024) -> Iterator[Record]:
    # Incompressible values: the bytes on disk are what was produced.
    rng = random.Random(prefix)
    for i in range(count):
        # Spread over two partitions explicitly: the sticky partitioner may put a short
        # burst in one, and a partition without records has no span to compare.
        yield Record(value=f"{prefix}{i}:".encode() + rng.randbytes(size), partition=i % 2)


def _fill(path: Path, leave: int) -> int:
    """Write a filler file until at most `leave` bytes are free; returns its size."""
    written = 0
    with path.open("wb") as sink:
        while True:
            free = os.statvfs(path.parent).f_bavail * os.statvfs(path.parent).f_frsize
            if free <= leave:
                break
            try:
                sink.write(b"\0" * min(MiB, free - leave))
                sink.flush()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            written += min(MiB, free - leave)
    return written


def _config(kafka: str, data_dir: Path, topic: str, **storage: Any) -> dict[str, Any]:
    return {
        "kafka": {"bootstrap_servers": kafka, "group_id": f"g-{topic}"},
        "storage": {"data_dir": str(data_dir), "memory_budget": "8MiB", **storage},
        "defaults": {"roll": {"max_rows": 2000, "max_age": "200ms"}},
        "topics": [{"source": topic}],
        "shutdown_timeout": "20s",
        "metrics": {"listen": "127.0.0.1:0"},
    }


def test_enospc_on_a_full_filesystem_pauses_and_resumes_when_space_returns(
    kafka: str,
    topic_factory: Callable[..., str],
    small_disk: Path,
    tmp_path: Path,
    reliability: Recorder,
) -> None:
    topic = topic_factory(partitions=2)
    data_dir = small_disk / "data"
    produced = produce(kafka, topic, _records("a", 4_000))
    serve = ServeProcess(_config(kafka, data_dir, topic), tmp_path)
    try:
        wait_landed(data_dir, topic, end_offsets(kafka, topic), timeout_s=90)
        filler = small_disk / "filler"
        _fill(filler, leave=0)
        produced += produce(kafka, topic, _records("b", 16_000))
        failed = serve.wait_event("seal_failed")
        assert "No space left on device" in failed["error"], failed
        serve.wait_event("partition_paused")
        time.sleep(5)  # full for a while: plateau must stay up and keep what it holds
        assert serve.process.poll() is None
        with Store.open(data_dir) as store:
            stuck = {s.partition: s.next_offset for s in store.spans(topic)}
        ends = end_offsets(kafka, topic)
        assert any(stuck.get(p, 0) < ends[p] for p in ends), (
            "nothing was held back by the full disk"
        )
        filler.unlink()
        freed_at = time.monotonic()
        wait_landed(data_dir, topic, ends, timeout_s=120)
        recover_s = time.monotonic() - freed_at
        seal_failures = len(serve.events("seal_failed"))
        pauses = len(serve.events("partition_paused"))
    finally:
        code = serve.stop()
    assert code == 0, serve.log_path.read_text()[-3000:]
    reliability.check(
        "Disk full (ENOSPC, tmpfs)",
        "48 MiB tmpfs filled to the last byte while 16k 1 KiB records arrived; "
        "filler removed 5 s later",
        data_dir,
        topic,
        every_offset(ends),
        produced=produced,
        recover_s=recover_s,
        seal_failures=seal_failures,
        pauses=pauses,
    )


def test_retention_frees_a_full_disk_and_ingestion_resumes(
    kafka: str,
    topic_factory: Callable[..., str],
    small_disk: Path,
    tmp_path: Path,
    reliability: Recorder,
) -> None:
    topic = topic_factory(partitions=2)
    data_dir = small_disk / "data"
    produced = produce(kafka, topic, _records("a", 16_000))
    config = _config(
        kafka,
        data_dir,
        topic,
        min_free_disk="12MiB",
        retention_interval="1s",
        deletion_grace="1s",
    )
    serve = ServeProcess(config, tmp_path)
    try:
        wait_landed(data_dir, topic, end_offsets(kafka, topic), timeout_s=90)
        # Something else takes the disk: less than min_free_disk is left.
        _fill(small_disk / "filler", leave=6 * MiB)
        produced += produce(kafka, topic, _records("b", 8_000))
        filled_at = time.monotonic()
        ends = end_offsets(kafka, topic)
        wait_landed(data_dir, topic, ends, timeout_s=120)
        recover_s = time.monotonic() - filled_at
    finally:
        code = serve.stop()
    assert code == 0, serve.log_path.read_text()[-3000:]
    # Retired segments are out of reads at once and deleted after the grace period.
    deleted = retired_events(serve)
    assert deleted, "retention freed nothing"
    assert serve.events("segment_deleted"), "retired segments were never deleted"
    starts = retired_prefix(deleted, ends)
    reliability.check(
        "Disk full, retention frees it",
        "min_free_disk 12 MiB; a filler left 6 MiB free on the 48 MiB tmpfs while 8k 1 KiB "
        "records arrived; retention deleted the oldest segments",
        data_dir,
        topic,
        every_offset(ends, starts),
        produced=produced,
        recover_s=recover_s,
        outcome="exactly once after the oldest were retired",
        deleted_segments=len(deleted),
        pauses=len(serve.events("partition_paused")),
        deleted_records=sum(starts.values()),
    )


class FullDisk:
    """A segment writer that fails with ENOSPC while `full` is set, like a full disk."""

    def __init__(self) -> None:
        self.full = threading.Event()
        self.refused = 0

    def __call__(
        self,
        directory: Path,
        table: pa.Table,
        compression: str,
        *,
        fsync: bool,
        index: IndexPolicy | None = None,
    ) -> tuple[Path, SegmentStats]:
        if self.full.is_set():
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))
        return write_segment(directory, table, compression, fsync=fsync, index=index)  # type: ignore[arg-type]


def test_injected_enospc_pauses_and_resumes(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    reliability: Recorder,
) -> None:
    topic = topic_factory(partitions=2)
    disk = FullDisk()
    writers_write_with(monkeypatch, disk)
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic}],
        group=f"g-{topic}",
        storage={"memory_budget": "4MiB"},
    )
    produced = produce(kafka, topic, _records("a", 2_000, size=256))
    with capture_logs() as logs, serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
        disk.full.set()
        produced += produce(kafka, topic, _records("b", 30_000, size=256))
        deadline = time.monotonic() + 60
        while not any(e["event"] == "partition_paused" for e in logs):
            assert time.monotonic() < deadline, "no partition paused while the disk was full"
            time.sleep(0.1)
        time.sleep(2)
        disk.full.clear()
        freed_at = time.monotonic()
        ends = end_offsets(kafka, topic)
        wait_landed(tmp_path, topic, ends, timeout_s=90)
        recover_s = time.monotonic() - freed_at
    failures = [e for e in logs if e["event"] == "seal_failed"]
    assert failures and all("No space left" in e["error"] for e in failures)
    reliability.check(
        "Disk full (injected ENOSPC)",
        "every segment write failed with ENOSPC while 30k records arrived; then writes "
        "succeeded again",
        tmp_path,
        topic,
        every_offset(ends),
        produced=produced,
        recover_s=recover_s,
        refused_writes=disk.refused,
        pauses=sum(1 for e in logs if e["event"] == "partition_paused"),
    )
