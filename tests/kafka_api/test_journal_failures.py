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
from kio.schema.errors import ErrorCode
from structlog.testing import capture_logs

from tests.core.test_journal_failures import STEPS, fail_at
from tests.kafka_api.support import (
    RawClient,
    api_config,
    listening,
    produce_body,
    record_batch,
    stored,
)
from tests.kafka_api.test_append_failures import PRODUCE, answers, producer_id

TOPICS = [{"name": "events", "partitions": 2, "roll": {"max_age": "1h"}}]
IDEMPOTENT = [b"i0", b"i1"]


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
        # An idempotent batch, and the producer's retry of it while the first may still
        # wait for its journal sync: a duplicate, answered with the first's offsets.
        client = RawClient(bootstrap)
        ids = {"producer_id": producer_id(client), "epoch": 0, "sequence": 0}
        retried = record_batch(IDEMPOTENT, **ids)
        for acks in (1, -1):
            answer = answers(client.call(PRODUCE, 9, produce_body("events", 0, retried, acks)))
            assert (answer[("events", 0)].error_code, answer[("events", 0)].base_offset) == (
                ErrorCode.none,
                5,
            )
        client.close()
        acked += IDEMPOTENT
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
            # Each partition's acknowledged a*, and partition 0's idempotent batch.
            start = 7 if event["partition"] == 0 else 5
            assert event["start_offset"] == start
            assert event["end_offset"] > start
        snapshot = server.snapshot()
        assert snapshot["journal"]["failed"] is True
        # Stored: what was durable, the duplicate once. The b* the journal cut were taken
        # and not kept: failed records (b* refused by the writer itself before the loop
        # heard of the failure are too, their offsets taken back out of those spans).
        assert snapshot["records"] == {"events": 12}
        assert snapshot["duplicates"] == 1
        cut = sum(event["end_offset"] - event["start_offset"] for event in refused)
        assert 0 < cut <= snapshot["failed_records"]["events"] <= 10
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
            (0, 7),
            (0, 8),
            (1, 5),
            (1, 6),
        ]
    table = stored(tmp_path / "store", "events")
    assert sorted(table.column("value").to_pylist()) == sorted(acked + after)
