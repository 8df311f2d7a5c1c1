"""Crashes at every step of a seal, then recovery: nothing half-written is ever served."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from plateau_core import SegmentState, SegmentUnavailableError, Store, WriterPolicy
from plateau_core.names import relative_segment_path
from plateau_core.partition_lock import PartitionLock
from plateau_core.recovery import sweep_unowned
from plateau_core.segment_file import write_segment
from tests.support import batch

REPO = Path(__file__).resolve().parents[2]


def _seal(store: Store, offsets: range) -> None:
    writer = store.writer(WriterPolicy())
    writer.acquire("t", 0)
    writer.append("t", 0, batch(offsets))
    writer.close()


def _folder(store: Store) -> Path:
    return store.data_dir / "topics/t/0"


def _acquire(store: Store) -> int | None:
    writer = store.writer(WriterPolicy())
    try:
        return writer.acquire("t", 0)
    finally:
        writer.close()


def test_crash_before_rename_leaves_only_a_temp_file(store: Store) -> None:
    _seal(store, range(0, 5))
    temp = _folder(store) / ".00000000000000000005.arrow.tmp-deadbeef0000"
    temp.write_bytes(b"half a segment")
    assert _acquire(store) == 5
    assert not temp.exists()
    assert store.read("t").to_table().column("offset").to_pylist() == list(range(5))


def test_crash_after_rename_before_commit_drops_the_orphan(store: Store) -> None:
    _seal(store, range(0, 5))
    orphan, _ = write_segment(_folder(store), pa.Table.from_batches([batch(range(5, 9))]))
    assert orphan.exists()
    # The orphan's records were never acknowledged to Kafka: they will be replayed.
    assert _acquire(store) == 5
    assert not orphan.exists()
    assert store.read("t").to_table().num_rows == 5
    _seal(store, range(5, 9))  # the replay lands under the same name
    assert store.read("t").to_table().column("offset").to_pylist() == list(range(9))


def test_crash_after_commit_keeps_the_segment(store: Store) -> None:
    table = pa.Table.from_batches([batch(range(0, 4))])
    path, stats = write_segment(_folder(store), table)
    store.manifest.commit_segment("t", 0, stats, relative_segment_path("t", 0, 0), table.schema)
    assert _acquire(store) == 4
    assert path.exists()
    assert store.read("t").to_table().num_rows == 4


def test_new_folders_are_made_durable_in_their_parents(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folders a first seal creates are synced into their parents: a crash must not
    take away a folder holding a segment the manifest records (fsyncing only the folder
    itself keeps its files, not its own name)."""
    synced: list[Path] = []
    fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(Path(f"/proc/self/fd/{fd}").readlink())
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    writer = store.writer(WriterPolicy())
    try:
        writer.acquire("t", 0)
        writer.append("t", 0, batch(range(3)))
        writer.flush()
    finally:
        writer.close()
    for folder in (store.data_dir, store.data_dir / "topics", store.data_dir / "topics/t"):
        assert folder in synced, f"{folder} not synced after a folder was created in it"


@pytest.mark.parametrize("damage", ["missing", "truncated", "resized"])
def test_damaged_segments_are_quarantined_not_served(store: Store, damage: str) -> None:
    _seal(store, range(0, 5))
    _seal(store, range(5, 10))
    victim = _folder(store) / "00000000000000000005.arrow"
    if damage == "missing":
        victim.unlink()
    elif damage == "truncated":
        victim.write_bytes(victim.read_bytes()[:100])
    else:
        victim.write_bytes(victim.read_bytes() + b"\0" * 8)
    # Captured at the structlog level: how earlier tests left its output configured must
    # not decide this one.
    with capture_logs() as logs:
        assert _acquire(store) == 10  # the watermark stands: those offsets are not re-ingested
    [bad] = store.manifest.segments("t", states=(SegmentState.QUARANTINED,))
    assert bad.start_offset == 5
    assert bad.problem
    [event] = [e for e in logs if e["event"] == "segment_quarantined"]
    assert (event["topic"], event["partition"], event["start_offset"]) == ("t", 0, 5)
    assert store.read("t").to_table().column("offset").to_pylist() == list(range(5))


def test_a_file_lost_after_the_snapshot_is_an_error_not_a_gap(store: Store) -> None:
    _seal(store, range(0, 5))
    result = store.read("t")
    (_folder(store) / "00000000000000000000.arrow").unlink()
    with pytest.raises(SegmentUnavailableError, match=r"00000000000000000000\.arrow"):
        result.to_table()


def _check_store(data_dir: Path, partitions: int) -> dict[int, int]:
    """Recover like a restarting writer, then check every invariant; return watermarks."""
    with Store.open(data_dir) as store:
        writer = store.writer(WriterPolicy())
        watermarks = {p: writer.acquire("crash", p) or 0 for p in range(partitions)}
        writer.close()
        for p in range(partitions):
            folder = data_dir / "topics/crash" / str(p)
            names = sorted(f.name for f in folder.iterdir()) if folder.exists() else []
            assert not [n for n in names if ".tmp-" in n], names
            segments = store.manifest.segments("crash", partitions=[p])
            assert sorted(s.path.rsplit("/", 1)[1] for s in segments) == [
                n for n in names if n.endswith(".arrow")
            ]
            offsets = store.read("crash", partitions=[p]).to_table().column("offset").to_pylist()
            assert offsets == list(range(watermarks[p])), f"partition {p} has gaps or duplicates"
            assert not store.manifest.segments("crash", states=(SegmentState.QUARANTINED,))
    return watermarks


def test_kill_9_during_seals_then_recover(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("PLATEAU_CRASH_SEED", "11")))
    partitions = 2
    data_dir = tmp_path / "data"
    progress = []
    for _ in range(5):
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.core.crash_writer", str(data_dir), str(partitions)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.2, 1.2))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
        watermarks = _check_store(data_dir, partitions)
        progress.append(sum(watermarks.values()))
    assert progress == sorted(progress)
    assert progress[-1] > 0


def test_the_start_sweep_removes_temp_files_where_no_writer_owns_the_partition(
    store: Store,
) -> None:
    """A seal killed half way in a partition never acquired again (its topic left the
    config): acquiring would remove its temp file, but nothing acquires it; the sweep at
    serve's start does. Segments and the lock file stay."""
    _seal(store, range(0, 5))
    temp = _folder(store) / ".00000000000000000005.arrow.tmp-deadbeef0000"
    temp.write_bytes(b"half a segment")
    other = store.data_dir / "topics/gone/3"
    other.mkdir(parents=True)
    stray = other / ".00000000000000000000.arrow.tmp-0123456789ab"
    stray.write_bytes(b"x" * 1000)
    with capture_logs() as logs:
        removed = sweep_unowned(store)
    assert sorted(removed) == sorted([temp, stray])
    assert not temp.exists() and not stray.exists()
    said = sorted((e["topic"], e["partition"]) for e in logs if e["event"] == "temp_file_removed")
    assert said == [("gone", 3), ("t", 0)]
    assert store.read("t").to_table().column("offset").to_pylist() == list(range(5))
    assert (_folder(store) / ".writer.lock").exists()
    assert sweep_unowned(store) == []


def test_the_start_sweep_removes_orphans_and_keeps_recorded_segments(store: Store) -> None:
    """A kill between a seal's rename and its manifest commit, in a partition never acquired
    again: the orphan (at the watermark) held records never acknowledged, as on acquire. So
    does every segment file of a partition the manifest has no watermark for."""
    _seal(store, range(0, 5))
    recorded = sorted(p for p in _folder(store).iterdir() if p.name.endswith(".arrow"))
    orphan, _ = write_segment(_folder(store), pa.Table.from_batches([batch(range(5, 9))]))
    with capture_logs() as logs:
        assert sweep_unowned(store) == [orphan]
    assert not orphan.exists()
    assert sorted(p for p in _folder(store).iterdir() if p.name.endswith(".arrow")) == recorded
    (said,) = [e for e in logs if e["event"] == "orphan_segment_removed"]
    assert (said["topic"], said["partition"], said["path"]) == ("t", 0, str(orphan))
    assert store.read("t").to_table().column("offset").to_pylist() == list(range(5))
    unknown = store.data_dir / "topics/never-recorded/0"
    unknown.mkdir(parents=True)
    stray, _ = write_segment(unknown, pa.Table.from_batches([batch(range(0, 3))]))
    assert sweep_unowned(store) == [stray]


def test_the_start_sweep_leaves_a_file_below_the_watermark_to_acquiring(store: Store) -> None:
    """Below the watermark only the manifest's rows tell an interrupted consolidation's output
    from a recorded segment: the sweep reads one watermark per folder, so acquiring, which
    reads the rows, removes it."""
    _seal(store, range(0, 5))
    consolidated = _folder(store) / "00000000000000000000-00000000000000000005.arrow"
    consolidated.write_bytes(b"a consolidation's output, never committed")
    assert sweep_unowned(store) == []
    assert consolidated.exists()
    assert _acquire(store) == 5
    assert not consolidated.exists()


def test_the_start_sweep_leaves_a_partition_a_writer_owns(store: Store) -> None:
    """A temp file or an unrecorded segment in a folder whose lock is held may be a seal or a
    consolidation in progress (in this process or another): its owner deals with it."""
    _seal(store, range(0, 5))
    writer = store.writer(WriterPolicy())
    try:
        writer.acquire("t", 0)
        temp = _folder(store) / ".00000000000000000005.arrow.tmp-feedface0000"
        temp.write_bytes(b"a seal in progress")
        renamed, _ = write_segment(_folder(store), pa.Table.from_batches([batch(range(5, 9))]))
        assert sweep_unowned(store) == []
        assert temp.exists() and renamed.exists()
    finally:
        writer.close()
    held = PartitionLock.acquire(store.data_dir / "topics/t/0", timeout_s=0)
    try:
        assert sweep_unowned(store) == []  # another process's consolidation
    finally:
        held.release()
    assert sorted(sweep_unowned(store)) == sorted([temp, renamed])


def test_the_start_sweep_of_a_store_without_topics_finds_nothing(store: Store) -> None:
    assert sweep_unowned(store) == []
