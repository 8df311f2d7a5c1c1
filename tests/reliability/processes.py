"""`plateau serve` as a separate process whose JSON log lines the test reads while it runs,
and what those lines say about retention."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.bridge_support import REPO


class ServeProcess:
    """`plateau serve` with its JSON log lines in a file the test reads while it runs."""

    def __init__(self, config: dict[str, Any], work: Path) -> None:
        self.config_path = work / "plateau.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = work / "serve.log"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bridge.cli", "serve", "--config", str(self.config_path)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            text=True,
        )

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log_path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == name:
                found.append(event)
        return found

    def wait_event(self, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log_path.read_text()[-3000:]
            if found := self.events(name):
                return found[-1]
            time.sleep(0.2)
        raise AssertionError(f"no {name} within {timeout_s} s: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)
        self._log.close()
        return self.process.returncode


def retired_prefix(events: list[dict[str, Any]], ends: Mapping[int, int]) -> dict[int, int]:
    """Per partition, where what retention retired ends; fails unless retention removed
    exactly each partition's oldest offsets, from 0 and without holes."""
    removed: dict[int, list[tuple[int, int]]] = {}
    for event in events:
        removed.setdefault(event["partition"], []).append(
            (event["start_offset"], event["end_offset"])
        )
    starts: dict[int, int] = {}
    for partition in ends:
        spans = sorted(removed.get(partition, []))
        cursor = 0
        for start, end in spans:
            assert start == cursor, f"partition {partition}: retention removed {spans}"
            cursor = end
        starts[partition] = cursor
    return starts


def retired_events(serve: ServeProcess) -> list[dict[str, Any]]:
    """Segments retention took out of reads (deleted from disk after the grace period)."""
    return serve.events("segment_retired") + serve.events("segment_retired_unreplicated")
