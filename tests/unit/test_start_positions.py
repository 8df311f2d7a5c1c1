"""Where an assigned partition starts, against a stand-in consumer: the checks of its topic
id and watermarks, when an attempt fails midway and is made again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from structlog.testing import capture_logs

from bridge.config.models import KafkaConfig
from bridge.consume.positions import start_offset
from plateau_core import Store


class _Consumer:
    """Answers the partition's watermarks (low, high); the first `failures` asks time out."""

    def __init__(self, low: int, high: int, failures: int = 0) -> None:
        self.low, self.high, self.failures = low, high, failures

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        if self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get watermarks"))
        return self.low, self.high


def test_a_topic_id_change_is_said_when_the_first_attempt_failed_after_asking_it(
    tmp_path: Path,
) -> None:
    """The source topic was created again while plateau was stopped; the first setup of its
    partition times out on Kafka's watermarks. The retry still says the topic changed."""
    store = Store.open(tmp_path)
    try:
        manifest = store.manifest
        manifest.record_source_topic("t", 0, "t", "old-id")
        kafka = KafkaConfig(bootstrap_servers="localhost:9")
        consumer = _Consumer(low=0, high=50, failures=1)
        tp = TopicPartition("t", 0)
        args: dict[str, Any] = {"kafka": kafka, "manifest": manifest, "plateau_topic": "t"}
        with capture_logs() as logs:
            with pytest.raises(KafkaException):
                start_offset(consumer, tp, 30, topic_id="new-id", **args)  # type: ignore[arg-type]
            start = start_offset(consumer, tp, 30, topic_id="new-id", **args)  # type: ignore[arg-type]
        assert start.recreated
        (event,) = [e for e in logs if e["event"] == "source_behind_store"]
        assert (event["recorded_topic_id"], event["topic_id"]) == ("old-id", "new-id")
        # Said, the new id is the partition's: the next start does not say it again.
        assert manifest.source_topic("t", 0) == ("t", "new-id")
        with capture_logs() as logs:
            assert not start_offset(consumer, tp, 30, topic_id="new-id", **args).recreated  # type: ignore[arg-type]
        assert not [e for e in logs if e["event"] == "source_behind_store"]
    finally:
        store.close()
