"""Synced segments written with O_DIRECT from memory: the same file and checksums as the
buffered write, and the buffered write wherever O_DIRECT is refused or the file is too big."""

from __future__ import annotations

import errno
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

import plateau_core.crc as crcs
from plateau_core import direct_io
from plateau_core.policies import IndexPolicy
from plateau_core.segment_file import inspect_segment, write_segment
from tests.support import batch

INDEX = IndexPolicy(bloom=("key",))


def _table(rows: int = 3000, value_size: int = 700) -> pa.Table:
    """Many small batches (as appends make them), so the writer regroups them."""
    return pa.Table.from_batches(
        [batch(range(start, start + 7), value_size=value_size) for start in range(0, rows, 7)]
    )


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the files written with O_DIRECT from here on."""
    sizes: list[int] = []
    real = direct_io.write_synced

    def recording(fd: int, directory: Path, data: Any, size: int) -> bool:
        written = real(fd, directory, data, size)
        if written:
            sizes.append(size)
        return written

    monkeypatch.setattr(direct_io, "write_synced", recording)
    return sizes


def _no_temp_files(directory: Path) -> bool:
    return all(not p.name.startswith(".") for p in directory.iterdir())


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_direct_write_makes_the_buffered_writes_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    fd = direct_io.open_direct(tmp_path / "probe")
    if fd is None:
        pytest.skip("the test folder's filesystem refuses O_DIRECT")
    os.close(fd)
    (tmp_path / "probe").unlink()
    direct = _spy(monkeypatch)
    table = _table()
    synced, synced_stats = write_segment(tmp_path / "a", table, compression, index=INDEX)  # type: ignore[arg-type]
    # Without fsync the segment goes through the page cache, as before.
    buffered, buffered_stats = write_segment(
        tmp_path / "b",
        table,
        compression,  # type: ignore[arg-type]
        fsync=False,
        index=INDEX,
    )
    assert direct == [synced.stat().st_size]
    assert synced.read_bytes() == buffered.read_bytes()
    assert synced_stats == buffered_stats
    assert synced_stats.checksums == crcs.of_file(synced)
    assert inspect_segment(synced) == synced_stats
    assert _no_temp_files(tmp_path / "a")


def _refusing_open(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """O_DIRECT opens fail with EINVAL, as on a filesystem without it (tmpfs before Linux
    6.6); returns the folders tried."""
    tried: list[str] = []
    real = os.open

    def open_(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        if flags & os.O_DIRECT:
            tried.append(str(Path(path).parent))
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real(path, flags, mode, **kw)

    monkeypatch.setattr(os, "open", open_)
    return tried


def test_refused_o_direct_falls_back_once_per_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried = _refusing_open(monkeypatch)
    direct = _spy(monkeypatch)
    table = _table(rows=700)
    with capture_logs() as logs:
        paths = [write_segment(tmp_path / "a", table.slice(i * 350, 350))[0] for i in (0, 1)]
        other, _ = write_segment(tmp_path / "b", table)
    assert tried == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert direct == []
    assert [e["directory"] for e in logs if e["event"] == "direct_io_refused"] == tried
    for path in [*paths, other]:
        stats = inspect_segment(path)
        assert stats.record_count in (350, 700)
    assert _no_temp_files(tmp_path / "a")


def test_a_write_refused_after_the_open_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some filesystems take the O_DIRECT open and refuse the write."""
    direct_fds: set[int] = set()
    real_open, real_write = os.open, os.write

    def open_(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        fd = real_open(path, flags, mode, **kw)
        if flags & os.O_DIRECT:
            direct_fds.add(fd)
        return fd

    def write(fd: int, data: Any) -> int:
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "write", write)
    table = _table(rows=700)
    path, stats = write_segment(tmp_path / "a", table)
    assert stats.checksums == crcs.of_file(path)
    assert inspect_segment(path) == stats
    assert _no_temp_files(tmp_path / "a")
    assert direct_io.refused(tmp_path / "a")
    opened = len(direct_fds)
    write_segment(tmp_path / "a", table.slice(0, 7))
    assert len(direct_fds) == opened  # not tried again in that folder


def test_a_file_bigger_than_the_arena_is_written_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct_io, "ARENA_MAX_BYTES", 256 * 1024)
    direct = _spy(monkeypatch)
    big, small = _table(rows=700), _table(rows=14, value_size=16)
    big_path, big_stats = write_segment(tmp_path / "a", big, "none")
    small_path, small_stats = write_segment(tmp_path / "b", small.slice(0, 7))
    assert big_path.stat().st_size > 256 * 1024
    assert direct == [small_path.stat().st_size]
    assert inspect_segment(big_path) == big_stats
    assert inspect_segment(small_path) == small_stats


@pytest.fixture
def shm_folder() -> Iterator[Path]:
    folder = Path("/dev/shm") / f"plateau-test-{uuid.uuid4().hex[:12]}"
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm")
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_a_tmpfs_folder_is_written_whichever_way_its_kernel_allows(shm_folder: Path) -> None:
    """tmpfs refused O_DIRECT before Linux 6.6 and takes it since: the segment lands either
    way, and the folder is marked refused exactly when the kernel refuses."""
    probe = shm_folder / "probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT))
    except OSError:
        takes_direct = False
    else:
        takes_direct = True
    path, stats = write_segment(shm_folder / "a", _table(rows=700))
    assert direct_io.refused(shm_folder / "a") is not takes_direct
    assert inspect_segment(path) == stats


def test_each_thread_writes_from_its_own_arena(tmp_path: Path) -> None:
    """Seal threads write at the same time: a shared arena would mix their files."""
    failures: list[BaseException] = []

    def run(n: int) -> None:
        try:
            for i in range(5):
                table = _table(rows=700, value_size=100 + n)
                path, stats = write_segment(tmp_path / f"t{n}-{i}", table)
                assert inspect_segment(path) == stats
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures
