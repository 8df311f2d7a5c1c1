"""Readers run while the writer seals and retention deletes; writers own partitions alone."""

from __future__ import annotations

import errno
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from plateau_core import (
    PartitionLockedError,
    Retention,
    RetentionPolicy,
    RollPolicy,
    Store,
    StoreLimits,
    Writer,
    WriterPolicy,
    partition_lock,
)
from plateau_core.errors import FlushTimeoutError
from plateau_core.segment_file import write_segment
from tests.support import append_patiently, batch

REPO = Path(__file__).resolve().parents[2]


def test_reader_while_writer_seals_and_retention_deletes(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    writer = store.writer(WriterPolicy(fsync=False, tick_s=0.01))
    writer.acquire("t", 0, roll=RollPolicy(max_rows=200, max_age_s=0.02))
    retention = Retention(
        store, default=RetentionPolicy(max_segments=5), limits=StoreLimits(deletion_grace_s=0.5)
    )
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = 0
    trimmed_reads = 0  # snapshots taken after retention had deleted the head

    def produce() -> None:
        offset = 0
        while not stop.is_set():
            append_patiently(writer, "t", 0, batch(range(offset, offset + 50)))
            offset += 50

    def read() -> None:
        nonlocal reads, trimmed_reads
        # A separate Store handle, as another process would have.
        reader_store = Store.open(tmp_path)
        try:
            while not stop.is_set():
                result = reader_store.read("t")
                offsets = result.to_table().column("offset").to_pylist()
                # Each snapshot is a contiguous run: retention trims the head, never the middle.
                if offsets:
                    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
                    trimmed_reads += offsets[0] > 0
                reads += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            reader_store.close()

    threads = [threading.Thread(target=produce), threading.Thread(target=read)]
    for t in threads:
        t.start()
    retention.start(interval_s=0.05)
    # Until the reader has read many snapshots, a good number of them while retention was
    # deleting the oldest segments under it.
    deadline = time.monotonic() + 120
    while (reads < 50 or trimmed_reads < 20) and not errors:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "the writer or the reader hung"
    retention.stop()
    writer.close()
    assert not errors, errors[0]
    assert reads >= 50 and trimmed_reads >= 20, (reads, trimmed_reads)
    retention.run()
    assert len(store.manifest.segments("t")) == 5
    store.close()


def test_one_writer_per_partition_in_process(store: Store) -> None:
    first = store.writer(WriterPolicy(fsync=False))
    second = store.writer(WriterPolicy(fsync=False))
    try:
        first.acquire("t", 0)
        with pytest.raises(PartitionLockedError, match="owned by another writer"):
            second.acquire("t", 0, timeout_s=0.2)
        second.acquire("t", 1)  # other partitions are free
        first.release("t", 0)
        assert second.acquire("t", 0, timeout_s=2) is None
    finally:
        first.close()
        second.close()


def test_a_partition_given_up_mid_seal_keeps_its_lock_until_the_seal_ends(
    store: Store,
) -> None:
    """A partition lost (or revoked after a flush timeout) while its seal is stuck: the
    next owner waits for that seal instead of recovering the folder under it, where the old
    seal would rename its file over the new owner's."""
    release_disk = threading.Event()
    stuck = threading.Event()

    def slow_write(*args: Any, **kwargs: Any) -> Any:
        stuck.set()
        release_disk.wait(10)
        return write_segment(*args, **kwargs)

    old = Writer(store, WriterPolicy(fsync=False), write=slow_write)
    new = store.writer(WriterPolicy(fsync=False))
    try:
        old.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        old.append("t", 0, batch(range(200)))
        with pytest.raises(FlushTimeoutError):
            old.flush(timeout_s=0.2)
        assert stuck.is_set()
        old.release("t", 0, seal=False, timeout_s=0.2)
        with pytest.raises(PartitionLockedError):
            new.acquire("t", 0, timeout_s=0.3)
        release_disk.set()
        assert new.acquire("t", 0, timeout_s=10) == 200
        new.append("t", 0, batch(range(200, 210)))
        new.flush()
    finally:
        release_disk.set()
        old.close()
        new.close()
    assert store.read("t").to_table().column("offset").to_pylist() == list(range(210))


def test_the_same_writer_takes_a_partition_back_once_its_old_seal_ends(store: Store) -> None:
    """Revoked while its seal is stuck, then assigned back to the same worker: acquire
    waits for that seal (the lock is still this writer's), then recovers as usual."""
    release_disk = threading.Event()

    def slow_write(*args: Any, **kwargs: Any) -> Any:
        release_disk.wait(10)
        return write_segment(*args, **kwargs)

    writer = Writer(store, WriterPolicy(fsync=False), write=slow_write)
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.append("t", 0, batch(range(50)))
        with pytest.raises(FlushTimeoutError):
            writer.flush(timeout_s=0.2)
        writer.release("t", 0, seal=False, timeout_s=0.1)
        with pytest.raises(PartitionLockedError):
            writer.acquire("t", 0, timeout_s=0.3)
        threading.Timer(0.3, release_disk.set).start()
        assert writer.acquire("t", 0, timeout_s=10) == 50
    finally:
        release_disk.set()
        writer.close()


def test_one_writer_per_partition_across_processes(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from plateau_core import Store\n"
            "w = Store.open(sys.argv[1]).writer()\n"
            "w.acquire('t', 0)\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
            str(tmp_path),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert holder.stdout is not None
        # Lines before "held" are the holder's own log output.
        assert any(line.strip() == "held" for line in iter(holder.stdout.readline, ""))
        store = Store.open(tmp_path)
        writer = store.writer(WriterPolicy(fsync=False))
        with pytest.raises(PartitionLockedError):
            writer.acquire("t", 0, timeout_s=0.3)
        holder.kill()  # a crashed owner's lock goes with its process
        holder.wait(timeout=10)
        assert writer.acquire("t", 0, timeout_s=5) is None
        writer.close()
        store.close()
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_a_lock_the_file_system_refuses_leaves_no_descriptor_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(partition_lock.fcntl, "flock", refuse)
    before = set(Path("/proc/self/fd").iterdir())
    with pytest.raises(OSError, match="No locks available"):
        partition_lock.PartitionLock.acquire(tmp_path / "p", timeout_s=1.0)
    assert set(Path("/proc/self/fd").iterdir()) - before == set()


def test_a_wait_for_a_lock_that_is_interrupted_leaves_no_descriptor_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = partition_lock.PartitionLock.acquire(tmp_path / "p", timeout_s=1.0)
    try:

        def interrupted(_seconds: float) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(partition_lock.time, "sleep", interrupted)
        before = set(Path("/proc/self/fd").iterdir())
        with pytest.raises(KeyboardInterrupt):
            partition_lock.PartitionLock.acquire(tmp_path / "p", timeout_s=30.0)
        assert set(Path("/proc/self/fd").iterdir()) - before == set()
    finally:
        held.release()
