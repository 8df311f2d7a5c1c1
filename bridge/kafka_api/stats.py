"""Counters of the Kafka API listener, read by /metrics and `plateau status`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SinkStats:
    connections: int = 0
    connections_total: int = 0
    requests: Counter[str] = field(default_factory=Counter)  # by API name
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (API, error name)
    # Records durable in the store (journal synced, or sealed), and their record batch
    # bytes, by topic: what the store keeps, whatever the acks.
    records: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    # Records taken (offsets handed out) that the store then did not keep: refused by the
    # writer, or cut from a failed journal. By topic.
    failed_records: Counter[str] = field(default_factory=Counter)
    poisoned: Counter[tuple[str, str]] = field(default_factory=Counter)  # (topic, on_error)
    throttled_requests: int = 0
    throttled_bytes: int = 0
    throttle_seconds: float = 0.0
    duplicates: int = 0
    refused_records: int = 0
    seal_failures: int = 0
    closed_connections: Counter[str] = field(default_factory=Counter)  # by reason

    def produced(self, topic: str, records: int, size: int) -> None:
        self.records[topic] += records
        self.bytes[topic] += size

    def failed(self, topic: str, records: int) -> None:
        self.failed_records[topic] += records

    def poison(self, topic: str, action: str, count: int) -> None:
        self.poisoned[(topic, action)] += count

    def snapshot(self) -> dict[str, Any]:
        return {
            "connections": self.connections,
            "connections_total": self.connections_total,
            "requests": dict(self.requests),
            "errors": {f"{api}:{error}": n for (api, error), n in self.errors.items()},
            "records": dict(self.records),
            "bytes": dict(self.bytes),
            "failed_records": dict(self.failed_records),
            "poison": {f"{topic}:{action}": n for (topic, action), n in self.poisoned.items()},
            "throttled_requests": self.throttled_requests,
            "throttled_bytes": self.throttled_bytes,
            "throttle_seconds": round(self.throttle_seconds, 3),
            "duplicates": self.duplicates,
            "refused_records": self.refused_records,
            "seal_failures": self.seal_failures,
            "closed_connections": dict(self.closed_connections),
        }
