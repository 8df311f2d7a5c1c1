"""examples/consume-kafka against the session's broker, as its README runs it: the demo
producer writes a logs-* topic, a poison record goes to the dead-letter topic, and the
events land with their own timestamps and per-minute roll-ups."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pyarrow.compute as pc
import pytest
from confluent_kafka import Consumer, Message, TopicPartition

from bridge.demo.events import run_producer
from bridge.demo.producer import Record, produce
from bridge.ingest.records import ERROR_HEADERS
from bridge.local_kafka.topics import create_topic
from bridge.ops.check import check
from tests.bridge_support import end_offsets, serving, stored, wait_landed
from tests.examples_support import EXAMPLES, example_config, example_module

POISON = b"GET /health 200"  # a log line that is not JSON


def letters_from(kafka: str, dlq: str, source: str) -> list[Message]:
    """The dead letters `source` sent to `dlq` (other runs' letters may share the topic)."""
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": f"read-{uuid.uuid4().hex}"})
    ends = end_offsets(kafka, dlq)
    consumer.assign([TopicPartition(dlq, p, 0) for p in ends])
    read: list[Message] = []
    deadline = time.monotonic() + 30
    try:
        while len(read) < sum(ends.values()) and time.monotonic() < deadline:
            read += [m for m in consumer.consume(100, timeout=1) if m.error() is None]
    finally:
        consumer.close()
    return [m for m in read if (ERROR_HEADERS[0], source.encode()) in (m.headers() or [])]


def test_consume_kafka_lands_a_matching_topic_its_dead_letters_and_roll_ups(
    kafka: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    env = {
        "PLATEAU__KAFKA__BOOTSTRAP_SERVERS": kafka,
        # A group and a store of this test's own: the session's broker is shared.
        "PLATEAU__KAFKA__GROUP_ID": f"plateau-example-{uuid.uuid4().hex[:8]}",
        "PLATEAU__STORAGE__DATA_DIR": str(data_dir),
        "PLATEAU__METRICS__LISTEN": "127.0.0.1:0",
    }
    config = example_config(EXAMPLES / "consume-kafka" / "plateau.yaml", env)
    (mapping,) = config.topics
    assert mapping.dlq is not None and not mapping.matches(mapping.dlq)
    topic = f"logs-{uuid.uuid4().hex[:8]}"
    # The README's steps: the dead-letter topic, then a poison record and the demo's events.
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert example_module("consume-kafka/create_dlq.py").main([]) == 0
    assert capsys.readouterr().out in {f"{mapping.dlq}: created\n", f"{mapping.dlq}: exists\n"}
    create_topic(kafka, topic, 2)
    produce(kafka, topic, [Record(value=POISON, key=b"lb-1", partition=0)])
    events = run_producer(kafka, topic, partitions=2, rate=2000, seconds=0.05)
    assert f"topic {mapping.source}: found {topic}" in "\n".join(check(config))

    with serving(config):
        wait_landed(data_dir, topic, end_offsets(kafka, topic))

    rows = stored(data_dir, topic)
    assert rows.num_rows == events
    # The row's timestamp is the event's own `ts`, not the time Kafka got it.
    stamps = [round(t.timestamp() * 1000) for t in rows.column("timestamp").to_pylist()]
    assert stamps == rows.column("ts").to_pylist()
    assert sorted(rows.column("seq").to_pylist()) == list(range(events))

    rollup = stored(data_dir, f"{topic}.rollup.1m")
    assert pc.sum(rollup.column("count")).as_py() == events
    assert set(rollup.column_names) >= {"service", "level", "sum_latency_ms", "max_latency_ms"}

    (letter,) = letters_from(kafka, mapping.dlq, topic)
    assert letter.value() == POISON and letter.key() == b"lb-1"
    headers = dict(letter.headers() or [])
    assert headers[ERROR_HEADERS[1]] == b"0" and headers[ERROR_HEADERS[2]] == b"0"
