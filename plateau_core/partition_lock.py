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
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return cls(path, fd)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise PartitionLockedError(
                        f"{directory} is owned by another writer (waited {timeout_s:.1f}s)"
                    ) from None
                time.sleep(0.05)
            except BaseException:
                # A lock the file system cannot take (ENOLCK on some network mounts): the
                # descriptor goes with the error, not with the process.
                os.close(fd)
                raise

    def release(self) -> None:
        if self._fd is None:
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
