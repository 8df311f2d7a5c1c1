"""Readiness and the stall detector of `plateau serve`.

Once a second the monitor reads the status file of every worker of this serve run and
decides whether the node is ready: workers report, partitions are assigned, Kafka is
reachable, and no assigned partition is stalled. A partition is stalled when records wait
for it in Kafka and neither its consumed offset nor its watermark moved for `stall_after`,
or when its oldest unsealed record is `stall_after` past its roll policy's max_age (a
writer that blocks). A stall is logged as an error naming the partition, once, and its end
is logged too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from bridge.ops.thread_names import name_os_threads
from bridge.ops.worker_status import read_run

log = structlog.get_logger(__name__)

PartitionKey = tuple[str, int]  # (plateau topic, partition)


@dataclass(frozen=True)
class Stall:
    topic: str
    partition: int
    worker: str
    reason: str

    def describe(self) -> str:
        return f"{self.topic}[{self.partition}] on {self.worker}: {self.reason}"


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reasons: tuple[str, ...]
    stalled: tuple[Stall, ...] = ()
    workers: int = 0
    assigned: int = 0

    def document(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "reasons": list(self.reasons),
            "stalled": [s.describe() for s in self.stalled],
            "workers": self.workers,
            "assigned_partitions": self.assigned,
        }


@dataclass
class _Progress:
    marker: tuple[int, int | None]  # (consumed offset, watermark)
    since: float  # monotonic time the marker last changed
    stalled: bool = False  # logged as stalled, not yet as progressing


@dataclass
class Monitor:
    data_dir: Path
    run: str
    stall_after_s: float
    interval_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    readiness: Readiness = Readiness(False, ("starting",))
    _progress: dict[PartitionKey, _Progress] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def check(self) -> Readiness:
        """Read the workers' files once and decide; called each interval by the thread."""
        snapshots = read_run(self.data_dir, self.run)
        live = [s for s in snapshots if s.get("alive")]
        reasons: list[str] = []
        if not live:
            reasons.append("no worker is running")
        wall = self.wall_clock()
        for worker in live:
            name = worker.get("worker", "?")
            silent = wall - float(worker.get("updated_at", 0))
            if silent > self.stall_after_s:
                reasons.append(f"{name} has not reported for {silent:.0f}s")
            if worker.get("kafka_down"):
                reasons.append(f"{name}: {worker['kafka_down']}")
            journal = (worker.get("kafka-api") or {}).get("journal") or {}
            if journal.get("failed"):
                reasons.append(
                    f"{name}: the journal failed ({journal.get('last_error')}); produce is "
                    "refused until a restart"
                )
        stalled = self._stalls(live)
        assigned = sum(len(w.get("partitions", [])) for w in live)
        # A Kafka API listener is ready without partitions: producers may create them.
        if live and assigned == 0 and not any(w.get("role") == "kafka-api" for w in live):
            reasons.append("no partition assigned")
        reasons += [f"stalled: {s.describe()}" for s in stalled]
        self.readiness = Readiness(not reasons, tuple(reasons), stalled, len(live), assigned)
        return self.readiness

    def _stalls(self, live: list[dict[str, Any]]) -> tuple[Stall, ...]:
        now = self.clock()
        seen: set[PartitionKey] = set()
        stalled: list[Stall] = []
        for worker in live:
            for part in worker.get("partitions", []):
                key = (str(part["topic"]), int(part["partition"]))
                seen.add(key)
                stall = self._judge(key, part, str(worker.get("worker", "?")), now)
                if stall is not None:
                    stalled.append(stall)
        for key in set(self._progress) - seen:  # revoked: whoever owns it now reports it
            del self._progress[key]
        return tuple(stalled)

    def _judge(
        self, key: PartitionKey, part: dict[str, Any], worker: str, now: float
    ) -> Stall | None:
        marker = (int(part["next_offset"]), part.get("watermark"))
        progress = self._progress.get(key)
        if progress is None or progress.marker != marker:
            was_stalled = progress is not None and progress.stalled
            progress = self._progress[key] = _Progress(marker, now, was_stalled)
        reason = _stall_reason(part, now - progress.since, self.stall_after_s)
        if reason is not None and not progress.stalled:
            log.error(
                "partition_stalled",
                topic=key[0],
                partition=key[1],
                worker=worker,
                reason=reason,
                next_offset=marker[0],
                watermark=marker[1],
                end_offset=part.get("end_offset"),
                paused=part.get("paused"),
            )
        elif reason is None and progress.stalled:
            log.info(
                "partition_progressing",
                topic=key[0],
                partition=key[1],
                worker=worker,
                next_offset=marker[0],
                watermark=marker[1],
                end_offset=part.get("end_offset"),
            )
        progress.stalled = reason is not None
        return None if reason is None else Stall(key[0], key[1], worker, reason)

    # --- in the background ------------------------------------------------------------------

    def start(self) -> None:
        self.check()
        self._thread = threading.Thread(target=self._loop, name="monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            name_os_threads()
            try:
                self.check()
            except Exception as exc:  # a bad file must not end health reporting
                log.error("monitor_failed", error=str(exc), error_type=type(exc).__name__)


def _stall_reason(part: dict[str, Any], idle_s: float, stall_after_s: float) -> str | None:
    end = part.get("end_offset")
    waiting = 0 if end is None else int(end) - int(part["next_offset"])
    if waiting > 0 and idle_s > stall_after_s:
        paused = f", paused ({part['paused']})" if part.get("paused") else ""
        return f"{waiting} records waiting in Kafka and no progress for {idle_s:.0f}s{paused}"
    age = part.get("unsealed_age_s")
    late = None if age is None else float(age) - float(part.get("max_age_s") or 0.0)
    if late is not None and late > stall_after_s:
        return f"oldest unsealed record is {age:.0f}s old, {late:.0f}s past the roll max_age"
    return None
