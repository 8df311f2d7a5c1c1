"""The free-disk floor (min_free_disk): below it a writer refuses appends, so the store never
fills the disk it shares with the system."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from plateau_core.errors import BackpressureError


class DiskFloor:
    def __init__(self, data_dir: Path, floor_bytes: int) -> None:
        self.data_dir = data_dir
        self.floor_bytes = floor_bytes
        self._free: tuple[float, int] = (0.0, 0)  # (checked at, free bytes)

    def low(self) -> bool:
        """Whether free space is below the floor (asked at most once a second)."""
        if self.floor_bytes <= 0:
            return False
        checked_at, free = self._free
        now = time.monotonic()
        if now - checked_at > 1.0:
            free = shutil.disk_usage(self.data_dir).free
            self._free = (now, free)
        return free < self.floor_bytes

    def check(self, topic: str, partition: int) -> None:
        """Raise BackpressureError (reason disk_full) when below the floor."""
        if self.low():
            raise BackpressureError(
                topic,
                partition,
                "disk_full",
                f"free disk {self._free[1]} bytes is below min_free_disk {self.floor_bytes}",
            )
