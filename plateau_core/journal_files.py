"""The journal's files: their names, and writing, syncing and reading them whole
(plateau_core.journal is the thread that writes groups into them)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from plateau_core.journal_codec import Chunk, FileRead, last_group, read_file
from plateau_core.names import fsync_path

JOURNAL_DIR = "journal"
SUFFIX = ".journal"
_IOV_MAX = 512  # chunks per writev, under the kernel's limit of 1024


def journal_name(first_seq: int) -> str:
    return f"{first_seq:020d}{SUFFIX}"


def numbered(path: Path) -> bool:
    stem = path.name.removesuffix(SUFFIX)
    return len(stem) == 20 and stem.isdigit()


def last_seq(paths: Sequence[Path]) -> int:
    """The number of the last whole group in these files (-1: none), without decoding any."""
    for path in reversed(paths):
        found = last_group(pa.py_buffer(path.read_bytes()))
        if found is not None:
            return found
    return -1


def read_path(path: Path) -> FileRead:
    # Read whole (a file is at most a few FILE_BYTES): the batches replayed from it point
    # into this buffer, which must outlive any file handle.
    return read_file(pa.py_buffer(path.read_bytes()), path.name)


def write_all(fd: int, chunks: Sequence[Chunk]) -> None:
    """writev until every chunk is written (a write may take only part of them)."""
    left: list[Chunk] = [c for c in chunks if len(c)]
    while left:
        part = left[:_IOV_MAX]
        written = os.writev(fd, part)
        done = 0
        for chunk in part:
            if written < len(chunk):
                break
            written -= len(chunk)
            done += 1
        left = left[done:]
        if written:
            # Part of a chunk went out: the rest of it goes next.
            left[0] = memoryview(left[0])[written:]


def sync_dir(directory: Path, fsync: bool) -> None:
    if fsync:
        fsync_path(directory)
