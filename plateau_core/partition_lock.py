"""One writer per partition, across processes: an advisory lock file in the partition folder.

The kernel drops the lock when its process dies, so a crashed owner never blocks the next.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from plateau_core.errors import PartitionLockedError
from plateau_core.names import make_dirs

LOCK_NAME = ".writer.lock"


class PartitionLock:
    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path, timeout_s: float, *, fsync: bool = True) -> PartitionLock:
        make_dirs(directory, fsync=fsync, mode=0o700)
        path = directory / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            cls._lock(fd, directory, timeout_s)
        except BaseException:
            # Taken by another writer, refused by the file system (ENOLCK on some network
            # mounts) or interrupted while waiting: the descriptor goes with the error.
            os.close(fd)
            raise
        return cls(path, fd)

    @staticmethod
    def _lock(fd: int, directory: Path, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise PartitionLockedError(
                        f"{directory} is owned by another writer (waited {timeout_s:.1f}s)"
                    ) from None
                time.sleep(0.05)

    def release(self) -> None:
        if self._fd is None:
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
