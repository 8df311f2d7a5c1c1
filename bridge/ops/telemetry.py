"""What one worker counts, in a form that crosses process boundaries.

A worker keeps its counters and its seal-latency histogram here and writes them with its
status file once a second; the serve process reads every worker's file to answer /metrics
and /readyz. That works the same whether the worker is a thread of serve or a child
process. Counters are cumulative over a serve run: a worker the supervisor restarts starts
from the snapshot its predecessor left, so sums over workers never go backwards.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from typing import Any

# Seal latency: file write + fsync + rename + manifest commit. Sub-10 ms on local SSDs,
# seconds when the disk or the manifest is contended.
SEAL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

Labels = tuple[str, ...]

# Counter names, each with the label names its values carry.
COUNTERS: dict[str, tuple[str, ...]] = {
    "records_ingested": ("topic", "partition"),
    "bytes_ingested": ("topic", "partition"),
    "seals": ("topic", "partition"),
    "sealed_bytes": ("topic", "partition"),
    "sealed_records": ("topic", "partition"),
    "pauses": ("reason",),
    "paused_seconds": ("reason",),
    "poison_records": ("topic", "action"),
    "errors": ("kind",),
    "consolidations": ("topic",),
    "consolidated_segments": ("topic",),
}


class Histogram:
    """Bucket counts (not cumulative; the last bucket is +Inf), sum and count."""

    def __init__(self, counts: list[int] | None = None, total: float = 0.0) -> None:
        self.counts = counts or [0] * (len(SEAL_BUCKETS) + 1)
        self.total = total

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(SEAL_BUCKETS, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, cumulative count) pairs in Prometheus' order, +Inf last."""
        running = 0
        out: list[tuple[str, float]] = []
        for bound, count in zip([*map(str, SEAL_BUCKETS), "+Inf"], self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out

    def merge(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total


class WorkerTelemetry:
    """Counters of one worker; updated from the worker thread and from seal threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, Labels], float] = {}
        self._seal_seconds: dict[str, Histogram] = {}

    def add(self, name: str, labels: Labels, amount: float = 1.0) -> None:
        with self._lock:
            self._add(labels, (name, amount))

    def ingested(self, topic: str, partition: int, records: int, nbytes: int) -> None:
        with self._lock:
            self._add(
                (topic, str(partition)), ("records_ingested", records), ("bytes_ingested", nbytes)
            )

    def sealed(self, topic: str, partition: int, records: int, nbytes: int, seconds: float) -> None:
        with self._lock:
            self._add(
                (topic, str(partition)),
                ("seals", 1),
                ("sealed_bytes", nbytes),
                ("sealed_records", records),
            )
            self._seal_seconds.setdefault(topic, Histogram()).observe(seconds)

    def _add(self, labels: Labels, *amounts: tuple[str, float]) -> None:
        """Callers hold the lock."""
        for name, amount in amounts:
            key = (name, labels)
            self._counters[key] = self._counters.get(key, 0.0) + amount

    def counter(self, name: str, labels: Labels) -> float:
        with self._lock:
            return self._counters.get((name, labels), 0.0)

    def dump(self) -> dict[str, Any]:
        """A JSON-able copy (see `load`)."""
        with self._lock:
            return {
                "counters": [[n, list(labels), v] for (n, labels), v in self._counters.items()],
                "seal_seconds": {t: [h.counts, h.total] for t, h in self._seal_seconds.items()},
            }

    def load(self, dumped: dict[str, Any]) -> None:
        """Continue from a predecessor's `dump()` (a restarted worker)."""
        counters, histograms = parse_dump(dumped)
        with self._lock:
            for key, value in counters:
                self._counters[key] = self._counters.get(key, 0.0) + value
            for topic, histogram in histograms:
                self._seal_seconds.setdefault(topic, Histogram()).merge(histogram)


def parse_dump(
    dumped: dict[str, Any],
) -> tuple[list[tuple[tuple[str, Labels], float]], list[tuple[str, Histogram]]]:
    """The counters and histograms of a `dump()`; entries of unknown shape are left out,
    so a file written by another plateau version cannot break a scrape."""
    counters = list(_counters(dumped.get("counters", [])))
    histograms = list(_histograms(dumped.get("seal_seconds", {})))
    return counters, histograms


def _counters(raw: Any) -> Iterator[tuple[tuple[str, Labels], float]]:
    for entry in raw if isinstance(raw, list) else []:
        try:
            name, labels, value = entry
        except (TypeError, ValueError):
            continue
        if name in COUNTERS and len(labels) == len(COUNTERS[name]):
            yield (name, tuple(str(x) for x in labels)), float(value)


def _histograms(raw: Any) -> Iterator[tuple[str, Histogram]]:
    for topic, entry in (raw if isinstance(raw, dict) else {}).items():
        try:
            counts, total = entry
        except (TypeError, ValueError):
            continue
        if isinstance(counts, list) and len(counts) == len(SEAL_BUCKETS) + 1:
            yield str(topic), Histogram([int(c) for c in counts], float(total))
