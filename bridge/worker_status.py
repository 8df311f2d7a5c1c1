"""A small JSON file per worker with what only the worker knows (paused partitions), for
`plateau status`. Written at most once a second; removed on a clean stop."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

RUN_DIR = "run"


class _State(Protocol):
    plateau_topic: str
    next_offset: int
    paused_reason: str | None


class StatusFile:
    def __init__(self, data_dir: Path, name: str) -> None:
        self.path = data_dir / RUN_DIR / f"{name}.json"
        self._written = 0.0

    def write(self, partitions: Mapping[tuple[str, int], _State], *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._written < 1.0:
            return
        self._written = now
        body = {
            "pid": os.getpid(),
            "updated_at": time.time(),
            "partitions": [
                {
                    "source": topic,
                    "topic": state.plateau_topic,
                    "partition": partition,
                    "next_offset": state.next_offset,
                    "paused": state.paused_reason,
                }
                for (topic, partition), state in sorted(partitions.items())
            ],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = self.path.with_suffix(".tmp")
        temp.write_text(json.dumps(body))
        temp.replace(self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def read_status_files(data_dir: Path) -> list[dict[str, Any]]:
    """Status of live workers (files of dead processes are ignored)."""
    found = []
    for path in sorted((data_dir / RUN_DIR).glob("*.json")):
        try:
            body = json.loads(path.read_text())
            os.kill(int(body["pid"]), 0)
        except (OSError, ValueError, KeyError):
            continue
        found.append(body)
    return found
