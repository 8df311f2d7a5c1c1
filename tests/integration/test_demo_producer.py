"""`plateau demo-producer` against the real broker: it creates the topic, produces in chunks,
stops within a chunk on SIGTERM, and what it reports as produced is what the topic holds."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterable, Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from bridge.cli import main
from bridge.demo import events
from bridge.demo.producer import Record

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


class ChunkSpy:
    """Passes each chunk through to the real producer, noting the sequence numbers it held;
    sends this process SIGTERM after three events of chunk `signal_in_chunk`."""

    def __init__(self, signal_in_chunk: int | None = None) -> None:
        self.chunks: list[list[int]] = []
        self.signal_in_chunk = signal_in_chunk
        self.real = events.produce

    def produce(self, bootstrap: str, topic: str, records: Iterable[Record]) -> int:
        seqs: list[int] = []

        def noted() -> Iterator[Record]:
            for record in records:
                assert record.value is not None
                seqs.append(json.loads(record.value)["seq"])
                if len(self.chunks) + 1 == self.signal_in_chunk and len(seqs) == 3:
                    # What `docker stop` does to the container's process 1, mid-chunk.
                    os.kill(os.getpid(), signal.SIGTERM)
                yield record

        acknowledged = self.real(bootstrap, topic, noted())
        self.chunks.append(seqs)
        return acknowledged


@pytest.fixture
def chunks(monkeypatch: pytest.MonkeyPatch) -> ChunkSpy:
    spy = ChunkSpy()
    monkeypatch.setattr(events, "produce", spy.produce)
    monkeypatch.setattr(events, "PRODUCER_CHUNK_S", 0.1)
    return spy


def _sequences(kafka: str, topic: str) -> list[int]:
    """Every event's sequence number in the topic, sorted."""
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": f"check-{uuid.uuid4().hex}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in metadata.partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while len(seen) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(seen)} of {ends}"
            for message in consumer.consume(500, timeout=1):
                assert message.error() is None, message.error()
                seen.append(json.loads(message.value())["seq"])
    finally:
        consumer.close()
    return sorted(seen)


@pytest.mark.timeout(120)
def test_seconds_produce_rate_times_seconds_in_chunks(kafka: str, chunks: ChunkSpy) -> None:
    topic = f"demo-producer-{uuid.uuid4().hex[:8]}"
    argv = ["--bootstrap-servers", kafka, "--topic", topic, "--partitions", "3"]
    assert main(["demo-producer", *argv, "--rate", "1000", "--seconds", "0.35"]) == 0
    # Chunks of 0.1 s of events with one running sequence, each acknowledged by the broker.
    assert [len(c) for c in chunks.chunks] == [100, 100, 100, 50]
    assert [seq for chunk in chunks.chunks for seq in chunk] == list(range(350))
    assert _sequences(kafka, topic) == list(range(350))


@pytest.mark.timeout(120)
def test_sigterm_stops_within_the_chunk_and_restores_handlers(
    kafka: str, chunks: ChunkSpy, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"demo-producer-{uuid.uuid4().hex[:8]}"
    chunks.signal_in_chunk = 2
    before = signal.getsignal(signal.SIGTERM)
    assert main(["demo-producer", "--bootstrap-servers", kafka, "--topic", topic]) == 0
    assert [len(c) for c in chunks.chunks] == [100, 3]
    assert signal.getsignal(signal.SIGTERM) is before
    stopped = [json.loads(line) for line in capsys.readouterr().err.splitlines()][-1]
    assert (stopped["event"], stopped["records"], stopped["signalled"]) == (
        "demo_producer_stopped",
        103,
        True,
    )
    # What it reports as produced is what the broker holds: the part-chunk was delivered.
    assert _sequences(kafka, topic) == list(range(103))
