"""What a worker writes to its status file once a second: the serve process reads it for
/metrics and /readyz, and `plateau status` for the paused column."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bridge.consume.batches import Key
from bridge.consume.state import PartitionState
from bridge.ops.telemetry import WorkerTelemetry
from plateau_core import Writer


def worker_snapshot(
    name: str,
    partitions: Mapping[Key, PartitionState],
    consumer: Consumer | None,
    writer: Writer,
    *,
    kafka_down: str | None,
    telemetry: WorkerTelemetry,
) -> dict[str, Any]:
    """A worker's partitions, offsets, pauses and counters, as JSON-able data. Without a
    `consumer` (one waiting for a broker that does not answer holds its other calls too),
    Kafka's offsets of the partitions are left out."""
    now = time.monotonic()
    unsealed = writer.unsealed_since()
    stats = writer.stats()
    compressed = writer.codecs.modes()
    rows = []
    # Seconds of pauses still running, on top of the paused_seconds counter.
    pausing: dict[str, float] = defaultdict(float)
    for (source, partition), state in sorted(partitions.items()):
        low, high = (
            (-1, -1)
            if consumer is None
            else consumer.get_watermark_offsets(TopicPartition(source, partition), cached=True)
        )
        since = unsealed.get((state.plateau_topic, partition))
        age = None if since is None else round(now - since, 3)
        rows.append(
            {
                "source": source,
                "topic": state.plateau_topic,
                "partition": partition,
                "next_offset": state.next_offset,
                "watermark": state.watermark,
                "committed": state.committed,
                "low_offset": low if low >= 0 else None,
                "end_offset": high if high >= 0 else None,
                "paused": state.paused_reason,
                "unsealed_age_s": age,
                "max_age_s": state.max_age_s,
                "compressed": compressed.get((state.plateau_topic, partition)),
            }
        )
        if state.paused_reason is not None:
            pausing[state.paused_reason] += now - state.paused_since
    return {
        "worker": name,
        "stopped": False,
        "kafka_down": kafka_down,
        "memory": {
            "used": stats.buffered_bytes + stats.in_flight_bytes,
            "budget": writer.policy.memory_budget_bytes,
        },
        "partitions": rows,
        "telemetry": telemetry.dump(),
        "pausing_s": dict(pausing),
    }
