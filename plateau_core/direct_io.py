"""Writing a file's bytes with O_DIRECT from a page-aligned memory arena.

A buffered write has the kernel copy every byte into the page cache: with 1 KiB records that
copy was half of `plateau serve`'s seal thread (docs/benchmarks.md, the Kafka API). A segment
built in this arena and written with O_DIRECT costs about 40% less CPU per byte, read-back
for its checksums included (bench/direct_io_probe.py).

Each thread keeps its arena (a private anonymous map) between files: a fresh map per file
costs more in page faults than the page-cache copy it saves. Between files its pages are
given back lazily (`rest`, MADV_FREE): the kernel takes them when it needs memory, as it
would the page cache's, and a thread that writes again before that reuses them without a
fault. Its size is the largest file the thread wrote, up to ARENA_MAX_BYTES; larger files
are written the buffered way. A filesystem that refuses O_DIRECT (EINVAL) is found once per
directory, whose files are then written the buffered way too.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from pathlib import Path

import structlog

from plateau_core.policies import MiB

log = structlog.get_logger(__name__)

# O_DIRECT wants the buffer, the length and the file position aligned to the device's
# logical block; a page is a multiple of every common one.
BLOCK = mmap.PAGESIZE
# roll.max_bytes's default (64 MiB) with room for its IPC framing and footer.
ARENA_MAX_BYTES = 96 * MiB
# Grown in steps so that a slowly growing segment size does not remap every time.
_ARENA_STEP = 8 * MiB

_local = threading.local()
_refused: set[str] = set()  # directories whose filesystem refuses O_DIRECT


def arena(size: int) -> mmap.mmap | None:
    """This thread's page-aligned arena of at least `size` bytes; None past ARENA_MAX_BYTES.

    Its contents are whatever the thread last wrote there. A view of the old arena that is
    still alive when it grows keeps that map until the view goes.
    """
    if size > ARENA_MAX_BYTES:
        return None
    current: mmap.mmap | None = getattr(_local, "arena", None)
    if current is None or len(current) < size:
        length = min(-(-size // _ARENA_STEP) * _ARENA_STEP, ARENA_MAX_BYTES)
        # Private: a shared anonymous map is shmem, slower to fault in.
        current = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        _local.arena = current
    return current


def refused(directory: Path) -> bool:
    """Whether files in `directory` are known to be refused O_DIRECT."""
    return str(directory) in _refused


def open_direct(path: Path) -> int | None:
    """A descriptor of the new file `path` opened with O_DIRECT, or None when its
    directory's filesystem refuses O_DIRECT (tried once per directory)."""
    directory = path.parent
    if refused(directory):
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o666)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        _refuse(directory, "open", exc)
        return None


def write_synced(fd: int, directory: Path, data: mmap.mmap, size: int) -> bool:
    """Write the first `size` bytes of `data` to the O_DIRECT file `fd` and fsync it; False
    when the filesystem refused the write (EINVAL), after which `directory` is written the
    buffered way.

    O_DIRECT writes whole blocks: the last one is padded with zeros, and the file truncated
    back to `size` before the fsync that makes its size and its blocks durable.
    """
    padded = -(-size // BLOCK) * BLOCK
    data[size:padded] = bytes(padded - size)
    with memoryview(data) as whole, whole[:padded] as blocks:
        done = 0
        try:
            while done < padded:
                done += os.write(fd, blocks[done:])
        except OSError as exc:
            if exc.errno != errno.EINVAL or done:
                raise
            _refuse(directory, "write", exc)
            return False
    os.ftruncate(fd, size)
    os.fsync(fd)
    return True


def rest(space: mmap.mmap) -> None:
    """Let the kernel take `space`'s pages when it is short of memory (MADV_FREE): what a
    file left in the arena is never read again, and until the kernel needs the pages a
    later file reuses them as they are."""
    with contextlib.suppress(OSError, AttributeError):  # a kernel before 4.5: kept resident
        space.madvise(mmap.MADV_FREE)


def _refuse(directory: Path, step: str, exc: OSError) -> None:
    _refused.add(str(directory))
    log.info("direct_io_refused", directory=str(directory), step=step, error=str(exc))
