"""The journal's thread failing under librdkafka producers (acks=all): the requests waiting
on it are answered KAFKA_STORAGE_ERROR at once, later ones too, /metrics and the log say so,
and after a restart the store holds every acknowledged record once and nothing else. The
requests used to wait for their timeout, and every retry after them did the same."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from structlog.testing import capture_logs

from tests.core.test_journal_failures import STEPS, fail_at
from tests.kafka_api.support import api_config, listening, stored

TOPICS = [{"name": "events", "partitions": 2, "roll": {"max_age": "1h"}}]


def deliver(
    bootstrap: str, values: list[bytes], **settings: Any
) -> tuple[list[Message], list[KafkaError], float]:
    """acks=all, no retries: the delivered, the errors and the seconds the reports took."""
    delivered: list[Message] = []
    failed: list[KafkaError] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        (failed.append(err) if err is not None else delivered.append(msg))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "retries": 0,
            "request.timeout.ms": 30_000,
            **settings,
        }
    )
    began = time.monotonic()
    for i, value in enumerate(values):
        producer.produce("events", value=value, partition=i % 2, on_delivery=report)
    assert producer.flush(60) == 0
    return delivered, failed, time.monotonic() - began


@pytest.mark.parametrize("step", STEPS)
def test_a_failed_journal_answers_waiting_and_later_produces_with_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    config = api_config(tmp_path / "store", TOPICS)
    acked = [b"a%d" % i for i in range(10)]
    with listening(config) as (server, bootstrap):
        sink = server.sink
        assert sink is not None and sink.writer.journal is not None
        delivered, failed, _ = deliver(bootstrap, acked)
        assert (len(delivered), failed) == (10, [])
        fail_at(step, sink.writer.journal, monkeypatch)
        with capture_logs() as logs:
            delivered, failed, seconds = deliver(bootstrap, [b"b%d" % i for i in range(10)])
            assert delivered == []
            assert {e.code() for e in failed} == {KafkaError.KAFKA_STORAGE_ERROR}
            # Answered when the journal failed, not at the request's timeout (30 s).
            assert seconds < 10
            # The journal is not trusted again before a restart: later records are refused.
            delivered, failed, _ = deliver(bootstrap, [b"c0", b"c1"])
            assert delivered == []
            assert {e.code() for e in failed} == {KafkaError.KAFKA_STORAGE_ERROR}
        events = [e for e in logs if e["event"] == "journal_failed"]
        assert len(events) == 1 and events[0]["first_seq"] >= 2
        refused = [e for e in logs if e["event"] == "produce_journal_failed"]
        assert refused, "no waiting request was refused by the failure"
        for event in refused:
            assert event["topic"] == "events"
            assert event["start_offset"] == 5  # each partition's acknowledged a*
            assert event["end_offset"] > 5
        snapshot = server.snapshot()
        assert snapshot["journal"]["failed"] is True
        # One per partition of each request refused: b* (waiting), then c*.
        assert snapshot["errors"]["Produce:kafka_storage_error"] >= 4
        monkeypatch.undo()
        began = time.monotonic()
    # The stop did not wait out shutdown_timeout for partitions that can never seal.
    assert time.monotonic() - began < 15

    with listening(config) as (_server, bootstrap):
        after = [b"d%d" % i for i in range(4)]
        delivered, failed, _ = deliver(bootstrap, after)
        assert failed == []
        assert sorted((m.partition(), m.offset()) for m in delivered) == [
            (0, 5),
            (0, 6),
            (1, 5),
            (1, 6),
        ]
    table = stored(tmp_path / "store", "events")
    assert sorted(table.column("value").to_pylist()) == sorted(acked + after)
