"""The listener's produced partitions as rows of its status file (the same rows a consume
worker writes), so `plateau status`, /metrics and /readyz treat them alike."""

from __future__ import annotations

import time
from typing import Any

from bridge.kafka_api.sink import ProduceSink


def partition_rows(sink: ProduceSink) -> list[dict[str, Any]]:
    """Each produced partition as the status file's partition rows: records accepted up to
    `end_offset`, sealed up to `watermark`; the difference is what is not yet durable."""
    unsealed = sink.writer.unsealed_since()
    compressed = sink.writer.codecs.modes()
    now = time.monotonic()
    rows = []
    for key, state in sorted(sink.partitions.items()):
        since = unsealed.get(key)
        rows.append(
            {
                "topic": state.topic,
                "partition": state.partition,
                "next_offset": state.next_offset,
                "end_offset": state.next_offset,
                "watermark": state.sealed_to,
                "committed": None,
                "paused": "throttled" if state.stalled else None,
                "unsealed_age_s": None if since is None else round(now - since, 3),
                "max_age_s": state.max_age_s,
                "acks_waiting": state.waiting(),
                "compressed": compressed.get((state.topic, state.partition)),
            }
        )
    return rows
