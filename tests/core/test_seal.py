"""Seals: durable files, one manifest transaction, idempotence, and failures that lose nothing."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from plateau_core import (
    FlushTimeoutError,
    InvalidInputError,
    ManifestConflictError,
    NoListener,
    RollPolicy,
    SealedSegment,
    Store,
    Writer,
    WriterPolicy,
)
from plateau_core.policies import IndexPolicy
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats
from plateau_core.verify import verify_store
from tests.support import batch


class Recorder(NoListener):
    def __init__(self, store: Store) -> None:
        self.store = store
        self.sealed: list[SealedSegment] = []
        self.failed: list[Exception] = []
        self.recorded_before_callback: list[bool] = []

    def on_sealed(self, segment: SealedSegment) -> None:
        watermark = self.store.manifest.watermark(segment.topic, segment.partition)
        self.recorded_before_callback.append(watermark == segment.end_offset)
        self.sealed.append(segment)

    def on_seal_failed(self, topic: str, partition: int, error: Exception) -> None:
        self.failed.append(error)


def test_seal_writes_a_named_file_and_one_manifest_row(store: Store) -> None:
    recorder = Recorder(store)
    writer = store.writer(WriterPolicy(), recorder)
    try:
        assert writer.acquire("events", 2) is None
        writer.append("events", 2, batch([7, 8, 9]))
        writer.flush()
    finally:
        writer.close()
    path = store.data_dir / "topics/events/2/00000000000000000007.arrow"
    assert path.exists()
    table = ipc.open_file(pa.memory_map(str(path))).read_all()
    assert table.column("offset").to_pylist() == [7, 8, 9]
    [row] = store.manifest.segments("events")
    assert (row.start_offset, row.end_offset, row.record_count) == (7, 10, 3)
    assert row.size_bytes == path.stat().st_size
    assert store.manifest.watermark("events", 2) == 10
    # The listener (which commits Kafka offsets) hears of a seal only after the manifest has it.
    assert recorder.recorded_before_callback == [True]
    assert recorder.sealed[0].end_offset == 10
    assert not [p for p in path.parent.iterdir() if ".tmp-" in p.name]


def test_recommitting_the_same_seal_is_a_noop(store: Store, tmp_path: Path) -> None:
    table = pa.Table.from_batches([batch([0, 1, 2])])
    _, stats = write_segment(tmp_path, table)
    relative = "topics/t/0/00000000000000000000.arrow"
    assert store.manifest.commit_segment("t", 0, stats, relative, table.schema) is True
    assert store.manifest.commit_segment("t", 0, stats, relative, table.schema) is False
    assert len(store.manifest.segments("t")) == 1
    assert store.manifest.watermark("t", 0) == 3


def test_overlapping_segments_are_refused(store: Store, tmp_path: Path) -> None:
    first = pa.Table.from_batches([batch([0, 1, 2])])
    _, stats = write_segment(tmp_path, first)
    store.manifest.commit_segment("t", 0, stats, "a", first.schema)
    longer = SegmentStats(0, 5, 5, 0, 0, 1, stats.schema_fingerprint)
    with pytest.raises(ManifestConflictError, match="already has a segment at offset 0"):
        store.manifest.commit_segment("t", 0, longer, "b", first.schema)
    inside = SegmentStats(2, 4, 2, 0, 0, 1, stats.schema_fingerprint)
    with pytest.raises(ManifestConflictError, match="overlaps the watermark 3"):
        store.manifest.commit_segment("t", 0, inside, "c", first.schema)
    assert store.manifest.watermark("t", 0) == 3


class FlakyDisk:
    """Fails the first `failures` segment writes with ENOSPC after writing half a temp file."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(
        self,
        directory: Path,
        table: pa.Table,
        compression: str,
        *,
        fsync: bool,
        index: IndexPolicy | None = None,
    ) -> tuple[Path, SegmentStats]:
        self.calls += 1
        if self.calls <= self.failures:
            directory.mkdir(parents=True, exist_ok=True)
            temp = directory / ".00000000000000000000.arrow.tmp-flaky"
            temp.write_bytes(b"ARROW1" * 10)
            temp.unlink()  # what write_segment does on failure
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_segment(directory, table, compression, fsync=fsync, index=index)  # type: ignore[arg-type]


def test_failed_seal_keeps_the_data_and_retries(store: Store) -> None:
    recorder = Recorder(store)
    # The disk stays full until the test has looked (a fixed number of failures raced a
    # loaded machine: the retries could succeed before the first look).
    disk = FlakyDisk(failures=10**9)
    writer = store.writer(WriterPolicy(retry_backoff_s=0.05, tick_s=0.01), recorder)
    writer._write_segment = disk  # the injection point for fault tests
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.append("t", 0, batch([0, 1, 2]))
        with pytest.raises(FlushTimeoutError, match="not sealed within"):
            writer.flush(timeout_s=0.02)
        deadline = time.monotonic() + 30
        while len(recorder.failed) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(recorder.failed) >= 2  # failed, and retried
        assert "No space left" in str(recorder.failed[0])
        assert store.manifest.segments("t") == []
        stats = writer.stats()
        assert stats.buffered_rows == 3 or stats.seals_in_flight == 1
        # Appends keep landing behind the failed seal, in order.
        writer.append("t", 0, batch([3, 4]))
        disk.failures = 0  # space again
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    assert disk.calls >= 3
    assert store.read("t").to_table().column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert store.manifest.watermark("t", 0) == 5
    assert writer.stats().failing == {}


def test_failed_manifest_commit_leaves_no_visible_file(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = store.manifest.commit_seal  # the writer's seals commit through it
    failures = {"left": 1}

    def broken(*args: object, **kwargs: object) -> bool:
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("manifest unavailable")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store.manifest, "commit_seal", broken)
    recorder = Recorder(store)
    writer = store.writer(WriterPolicy(retry_backoff_s=10, tick_s=0.01), recorder)
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.append("t", 0, batch([0, 1]))
        with pytest.raises(FlushTimeoutError, match=r"t\[0\]"):
            writer.flush(timeout_s=0.5)
        assert [str(e) for e in recorder.failed] == ["manifest unavailable"]
        folder = store.data_dir / "topics/t/0"
        assert [p.name for p in folder.iterdir() if p.suffix == ".arrow"] == []
        writer.flush(timeout_s=10)  # an explicit flush retries at once
    finally:
        writer.close()
    assert store.read("t").to_table().num_rows == 2


def test_a_commit_whose_outcome_is_unknown_keeps_its_files(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit lands, then fails (a connection lost during COMMIT), and the manifest
    cannot be asked whether it landed: the files the manifest may now name stay, and the
    retry finds the group recorded."""
    commit, has_segment = store.manifest.commit_seal, store.manifest.has_segment
    down = threading.Event()

    def lands_then_fails(*args: object, **kwargs: object) -> bool:
        commit(*args, **kwargs)  # type: ignore[arg-type]
        down.set()
        raise OSError("server closed the connection unexpectedly")

    def unreachable(*args: object, **kwargs: object) -> bool:
        if down.is_set():
            raise OSError("connection refused")
        return has_segment(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store.manifest, "commit_seal", lands_then_fails)
    monkeypatch.setattr(store.manifest, "has_segment", unreachable)
    recorder = Recorder(store)
    writer = store.writer(WriterPolicy(retry_backoff_s=10, tick_s=0.01), recorder)
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.append("t", 0, batch([0, 1]))
        with pytest.raises(FlushTimeoutError):
            writer.flush(timeout_s=0.5)
        deadline = time.monotonic() + 10
        while not recorder.failed:  # told after the writer's lock is let go
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert "cannot say whether it landed" in str(recorder.failed[0])
        folder = store.data_dir / "topics/t/0"
        assert [p.name for p in folder.iterdir() if p.suffix == ".arrow"] != []
        # Records arriving before the retry are not merged into it: the retry writes the
        # same file and finds its commit, and they seal on their own.
        writer.append("t", 0, batch([2, 3]))
        monkeypatch.setattr(store.manifest, "commit_seal", commit)
        down.clear()
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    spans = [(s.start_offset, s.end_offset) for s in store.manifest.segments("t")]
    assert spans == [(0, 2), (2, 4)]
    report = verify_store(store, deep=True)
    assert report.problems == [] and report.orphans == []
    assert store.read("t").to_table().column("offset").to_pylist() == [0, 1, 2, 3]
    assert store.manifest.watermark("t", 0) == 4


def test_a_seal_whose_outcome_is_unknown_stays_exact_through_a_failed_write(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit lands with its outcome unknown; the retry then fails to write (a full
    disk). The next retry still writes only what the first did: merged with records
    buffered since, it would replace the recorded file and be refused forever."""
    commit, has_segment = store.manifest.commit_seal, store.manifest.has_segment
    down = threading.Event()
    disk_full = threading.Event()

    def lands_then_fails(*args: object, **kwargs: object) -> bool:
        commit(*args, **kwargs)  # type: ignore[arg-type]
        down.set()
        raise OSError("server closed the connection unexpectedly")

    def unreachable(*args: object, **kwargs: object) -> bool:
        if down.is_set():
            raise OSError("connection refused")
        return has_segment(*args, **kwargs)  # type: ignore[arg-type]

    def write(
        directory: Path,
        table: pa.Table,
        compression: str,
        *,
        fsync: bool,
        index: IndexPolicy | None = None,
    ) -> tuple[Path, SegmentStats]:
        if disk_full.is_set():
            disk_full.clear()
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_segment(directory, table, compression, fsync=fsync, index=index)  # type: ignore[arg-type]

    monkeypatch.setattr(store.manifest, "commit_seal", lands_then_fails)
    monkeypatch.setattr(store.manifest, "has_segment", unreachable)
    recorder = Recorder(store)
    writer = Writer(store, WriterPolicy(retry_backoff_s=10, tick_s=0.01), recorder, write=write)
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.append("t", 0, batch([0, 1]))
        with pytest.raises(FlushTimeoutError):
            writer.flush(timeout_s=0.5)
        deadline = time.monotonic() + 10
        while not recorder.failed:  # told after the writer's lock is let go
            assert time.monotonic() < deadline
            time.sleep(0.01)
        writer.append("t", 0, batch([2, 3]))
        monkeypatch.setattr(store.manifest, "commit_seal", commit)
        down.clear()
        disk_full.set()
        with pytest.raises(FlushTimeoutError):
            writer.flush(timeout_s=0.5)
        while len(recorder.failed) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert "No space left" in str(recorder.failed[1])
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    spans = [(s.start_offset, s.end_offset) for s in store.manifest.segments("t")]
    assert spans == [(0, 2), (2, 4)]
    report = verify_store(store, deep=True)
    assert report.problems == [] and report.orphans == []
    assert store.read("t").to_table().column("offset").to_pylist() == [0, 1, 2, 3]


class RaisesOnce(NoListener):
    """A listener whose hooks fail the first time each is called."""

    def __init__(self) -> None:
        self.sealed: list[int] = []
        self.journaled: list[int] = []

    def on_sealed(self, segment: SealedSegment) -> None:
        self.sealed.append(segment.end_offset)
        if len(self.sealed) == 1:
            raise RuntimeError("listener bug")

    def on_journaled(self, seq: int) -> None:
        self.journaled.append(seq)
        if len(self.journaled) == 1:
            raise RuntimeError("listener bug")


@pytest.mark.parametrize("journal", [False, True])
def test_a_listener_that_raises_does_not_stop_the_partition(store: Store, journal: bool) -> None:
    """A hook's error is the listener's: the seal it reports still finishes, the next seals
    and journal writes go on, and the partition can be given up and taken back."""
    listener = RaisesOnce()
    writer = store.writer(WriterPolicy(fsync=False), listener, journal=journal)
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.append("t", 0, batch([0, 1]))
        writer.flush(timeout_s=10)
        writer.append("t", 0, batch([2, 3]))
        writer.flush(timeout_s=10)
        writer.release("t", 0)
        assert writer.acquire("t", 0, timeout_s=10) == 4
    finally:
        writer.close()
    assert listener.sealed == [2, 4]
    if journal:
        assert len(listener.journaled) == 2
    assert store.read("t").to_table().column("offset").to_pylist() == [0, 1, 2, 3]


def test_seals_of_many_partitions_share_a_small_pool(store: Store) -> None:
    writer = store.writer(WriterPolicy(writer_threads=2, fsync=False))
    try:
        for p in range(32):
            writer.acquire("t", p, roll=RollPolicy(max_rows=2, max_age_s=3600))
            writer.append("t", p, batch([0, 1]))
        writer.flush()
        names = {t.name for t in threading.enumerate() if t.name.startswith("seal")}
        assert 1 <= len(names) <= 2
    finally:
        writer.close()
    assert len(store.manifest.segments("t")) == 32


class Advances(NoListener):
    def __init__(self) -> None:
        self.advanced: list[tuple[str, int, int]] = []

    def on_advanced(self, topic: str, partition: int, next_offset: int) -> None:
        self.advanced.append((topic, partition, next_offset))


def test_skipped_offsets_move_the_watermark_once_everything_before_is_sealed(
    store: Store,
) -> None:
    listener = Advances()
    writer = store.writer(WriterPolicy(fsync=False), listener)
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.skip("t", 0, 3)  # offsets 0..2 were poison: nothing buffered, moves at once
        writer.flush()
        assert store.manifest.watermark("t", 0) == 3
        writer.append("t", 0, batch([3, 4]))
        writer.skip("t", 0, 8)  # 5..7 skipped, but 3..4 are not sealed yet: must wait
        assert store.manifest.watermark("t", 0) == 3
        with pytest.raises(InvalidInputError, match="not after the last accepted offset 7"):
            writer.append("t", 0, batch([6]))
        writer.flush()
        assert store.manifest.watermark("t", 0) == 8
        writer.skip("t", 0, 5)  # behind the watermark: nothing to do
    finally:
        writer.close()
    assert listener.advanced == [("t", 0, 3), ("t", 0, 8)]
    assert store.read("t").to_table().column("offset").to_pylist() == [3, 4]
