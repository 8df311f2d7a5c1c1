"""Whether a worker's Kafka client can reach the brokers, from librdkafka's callbacks.

librdkafka reports every failed attempt of every connection (with its own backoff); during
an outage that is tens of lines a second. Each kind of error is logged once, then once per
CLIENT_ERROR_LOG_INTERVAL_S with how often it recurred meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import structlog
from confluent_kafka import KafkaError

from bridge.ops.telemetry import WorkerTelemetry

log = structlog.get_logger(__name__)
CLIENT_ERROR_LOG_INTERVAL_S = 30.0


class ClientHealth:
    """Serves a consumer's error_cb and its statistics; `down` says why Kafka is unreachable."""

    def __init__(self, worker: str, bootstrap_servers: str, telemetry: WorkerTelemetry) -> None:
        self.worker = worker
        self.bootstrap_servers = bootstrap_servers
        self.telemetry = telemetry
        self.down: str | None = None
        # Per error code: when it was last logged and how often it recurred since.
        self._errors: dict[str, tuple[float, int]] = {}

    def on_error(self, error: KafkaError) -> None:
        """librdkafka's client-level errors: lost connections, unreachable brokers."""
        self.telemetry.add("errors", ("kafka_" + error.name().strip("_").lower(),))
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.down = f"all brokers down ({self.bootstrap_servers})"
        now = time.monotonic()
        last, repeated = self._errors.get(error.name(), (-CLIENT_ERROR_LOG_INTERVAL_S, 0))
        if now - last < CLIENT_ERROR_LOG_INTERVAL_S:
            self._errors[error.name()] = (last, repeated + 1)
            return
        self._errors[error.name()] = (now, 0)
        log.warning(
            "kafka_client_error",
            worker=self.worker,
            error=str(error),
            code=error.name(),
            repeated=repeated,
        )

    def on_stats(self, stats: Mapping[str, Any]) -> None:
        """librdkafka's statistics: whether any real broker connection is up."""
        brokers = stats.get("brokers", {})
        states = [b.get("state") for b in brokers.values() if b.get("source") != "logical"]
        if any(state == "UP" for state in states):
            if self.down is not None:
                log.info("kafka_reachable", worker=self.worker)
                self._errors.clear()  # a new outage is logged from its first error
            self.down = None
        elif states:
            self.down = f"no broker connection up ({self.bootstrap_servers})"
