"""Small builders shared by the tests."""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from plateau_core import Append, BackpressureError, RollPolicy, Store, Writer, WriterPolicy
from plateau_core.names import relative_segment_path
from plateau_core.policies import IndexPolicy
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats

BASE_MS = 1_700_000_000_000
HOUR_MS = 3_600_000


def batch(
    offsets: Sequence[int],
    *,
    times: Sequence[int] | None = None,
    value_size: int = 16,
    extra: dict[str, pa.Array] | None = None,
) -> pa.RecordBatch:
    """A segment-shaped batch: offset, timestamp (BASE_MS + offset by default), key, value."""
    stamps = [BASE_MS + o for o in offsets] if times is None else list(times)
    columns: dict[str, pa.Array] = {
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array(stamps, pa.timestamp("ms", tz="UTC")),
        "key": pa.array([f"k{o % 7}".encode() for o in offsets], pa.binary()),
        "value": pa.array([(f"v{o}-".encode() * value_size)[:value_size] for o in offsets]),
    }
    columns.update(extra or {})
    return pa.RecordBatch.from_pydict(columns)


def append_patiently(
    writer: Writer, topic: str, partition: int, data: pa.RecordBatch, timeout_s: float = 30.0
) -> int:
    """Append, waiting out backpressure the way the bridge does; returns refusals seen."""
    refusals = 0
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            writer.append(topic, partition, data)
            return refusals
        except BackpressureError:
            refusals += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def append_group_patiently(
    writer: Writer, appends: Sequence[Append], timeout_s: float = 30.0
) -> int:
    """append_group, waiting out backpressure; returns the group's journal number."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            seq = writer.append_group(appends)
            assert seq is not None, "the writer has no journal"
            return seq
        except BackpressureError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def fill_segments(
    store: Store, partition: int, segments: int, rows: int = 10, *, topic: str = "t"
) -> None:
    """`segments` sealed segments of `rows` rows, segment i timestamped at BASE_MS + i hours."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        start = writer.acquire(topic, partition, roll=RollPolicy(max_age_s=3600)) or 0
        for i in range(segments):
            offsets = range(start + i * rows, start + (i + 1) * rows)
            times = [BASE_MS + i * HOUR_MS + j for j in range(rows)]
            writer.append(topic, partition, batch(offsets, times=times))
            writer.flush()
    finally:
        writer.close()


def record_segment(
    store: Store,
    topic: str,
    partition: int,
    table: pa.Table,
    *,
    index: IndexPolicy | None = None,
) -> SegmentStats:
    """`table` written as a segment file, laid out as the writer lays one out, and recorded in
    the manifest, with no decoder in between: a segment sealed by an older plateau, or a
    file made by hand."""
    directory = store.data_dir / "topics" / topic / str(partition)
    _path, stats = write_segment(directory, table, fsync=False, index=index)
    relative = relative_segment_path(topic, partition, stats.start_offset)
    store.manifest.commit_segment(topic, partition, stats, relative, table.schema)
    return stats


def writers_write_with(monkeypatch: pytest.MonkeyPatch, disk: Callable[..., object]) -> None:
    """Every Writer made from now on (the test's serve included) writes its segments through
    `disk`. The Kafka API's journaled writer subclasses Writer and is imported on first use:
    imported after the patch, it would subclass the partial and fail, so a test passed only
    when another test had imported it first."""
    importlib.import_module("plateau_core.journaled_writer")
    monkeypatch.setattr("plateau_core.writer.Writer", functools.partial(Writer, write=disk))


class GatedDisk:
    """A segment writer that blocks until the test opens the gate (or `timeout_s` passes)."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.timeout_s = timeout_s

    def __call__(
        self,
        directory: Path,
        table: pa.Table,
        compression: str,
        *,
        fsync: bool,
        index: IndexPolicy | None = None,
    ) -> tuple[Path, SegmentStats]:
        self.entered.set()
        self.gate.wait(timeout=self.timeout_s)
        return write_segment(directory, table, compression, fsync=fsync, index=index)  # type: ignore[arg-type]


class SlowDisk:
    """A segment writer that takes `delay_s` longer than the disk does."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __call__(
        self,
        directory: Path,
        table: pa.Table,
        compression: str,
        *,
        fsync: bool,
        index: IndexPolicy | None = None,
    ) -> tuple[Path, SegmentStats]:
        time.sleep(self.delay_s)
        return write_segment(directory, table, compression, fsync=fsync, index=index)  # type: ignore[arg-type]
