"""`plateau demo-producer` against the real broker: it creates the topic, and what it reports
as produced is what the topic holds."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from bridge.cli import main

PARTITIONS = 3
RATE = 200
SECONDS = 1.0


@pytest.mark.timeout(120)
def test_produces_what_it_reports_into_the_topic_it_creates(
    kafka: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"demo-producer-{uuid.uuid4().hex[:8]}"  # new: the command must create it
    argv = ["--bootstrap-servers", kafka, "--topic", topic, "--partitions", str(PARTITIONS)]
    started = time.monotonic()
    assert main(["demo-producer", *argv, "--rate", str(RATE), "--seconds", str(SECONDS)]) == 0
    elapsed = time.monotonic() - started

    logs = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    stopped = next(entry for entry in logs if entry["event"] == "demo_producer_stopped")
    assert (stopped["topic"], stopped["records"]) == (topic, RATE * SECONDS)
    # Paced, not a burst: rate x seconds events take about that long.
    assert SECONDS * 0.8 <= elapsed < 60

    consumer = Consumer({"bootstrap.servers": kafka, "group.id": f"check-{uuid.uuid4().hex}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        assert sorted(metadata.partitions) == list(range(PARTITIONS))
        ends = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()
    assert all(low == 0 for low, _ in ends)
    assert sum(high for _, high in ends) == stopped["records"]
