"""A small JSON file per worker with what only the worker knows: its partitions, their Kafka
offsets and pauses, and its counters. `plateau status` reads it, and so does the serve
process for /metrics and /readyz. Written at most once a second (atomically, by rename).

Files are named `{run}.{worker}.json`, the run being the serve process, so several serve
processes can share a data_dir and a restarted worker finds its predecessor's counters.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

RUN_DIR = "run"
WRITE_INTERVAL_S = 1.0


_runs = itertools.count()
_live: set[str] = set()  # the runs of this process not ended yet


def new_run_id() -> str:
    """A serve run's id: its process id, a sequence number for runs of one process, and a
    random part: a container's serve is process 1 after every restart, and must neither take
    up a crashed run's files as its own nor keep them as a live process's."""
    run = f"serve-{os.getpid()}-{next(_runs)}-{secrets.token_hex(4)}"
    _live.add(run)
    return run


class StatusFile:
    def __init__(self, data_dir: Path, name: str, run: str) -> None:
        self.path = data_dir / RUN_DIR / f"{run}.{name}.json"
        self._written = 0.0
        self._failing: str | None = None

    def due(self) -> bool:
        return time.monotonic() - self._written >= WRITE_INTERVAL_S

    def previous(self) -> dict[str, Any] | None:
        """What a predecessor of this worker (same run, same name) last wrote."""
        return _read(self.path)

    def write(self, body: dict[str, Any]) -> None:
        """Replace the file; a failure (a full disk) is logged once and never stops the
        worker: the file just goes stale, which the monitor reports as not ready."""
        self._written = time.monotonic()
        document = {"pid": os.getpid(), "updated_at": time.time(), **body}
        temp = self.path.with_suffix(".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temp.write_text(json.dumps(document))
            temp.replace(self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            if self._failing is None:
                log.warning("status_file_unwritable", path=str(self.path), error=str(exc))
            self._failing = str(exc)
            return
        if self._failing is not None:
            log.info("status_file_writable", path=str(self.path))
            self._failing = None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _alive(pid: object) -> bool:
    try:
        number = int(str(pid))
        # 0 and negative numbers would ask about process groups, not one process.
        if number <= 0:
            return False
        os.kill(number, 0)
    except (OSError, ValueError):
        return False
    return True


def _read_files(data_dir: Path, pattern: str) -> list[dict[str, Any]]:
    found = []
    for path in sorted((data_dir / RUN_DIR).glob(pattern)):
        body = _read(path)
        if body is not None:
            body["alive"] = not body.get("stopped") and _alive(body.get("pid"))
            found.append(body)
    return found


def read_status_files(data_dir: Path) -> list[dict[str, Any]]:
    """Status of live, running workers (files of dead or stopped ones are ignored)."""
    return [body for body in _read_files(data_dir, "*.json") if body["alive"]]


def read_run(data_dir: Path, run: str) -> list[dict[str, Any]]:
    """Every worker file of one serve run, live or not, each with `alive` set."""
    return _read_files(data_dir, f"{run}.*.json")


def remove_run(data_dir: Path, run: str) -> None:
    _live.discard(run)
    for path in (data_dir / RUN_DIR).glob(f"{run}.*"):
        path.unlink(missing_ok=True)


def remove_stale(data_dir: Path) -> None:
    """Files of serve runs that are gone (a crash leaves them behind)."""
    for path in (data_dir / RUN_DIR).glob("*.json"):
        run = path.name.split(".", 1)[0]
        owner = run.split("-")
        serve_pid = owner[1] if len(owner) >= 3 and owner[0] == "serve" else ""
        # This process's pid on a run it did not start: the process before it under the
        # same pid (a restarted container's process 1) crashed.
        if not _alive(serve_pid) or (serve_pid == str(os.getpid()) and run not in _live):
            with contextlib.suppress(OSError):
                path.unlink()
