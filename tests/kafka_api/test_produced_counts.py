"""plateau_kafka_api_records_total counts records once the store keeps them for good: with
`durability: segment` when sealed, whatever the acks. It counted them when the writer took
them, so records an acks=1 producer was answered for counted before anything held them."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from tests.kafka_api.support import RawClient, api_config, listening, produce_body, record_batch
from tests.kafka_api.test_append_failures import PRODUCE, answers

# Nothing seals by age during the test: only an acks=all request seals.
TOPICS = [{"name": "events", "partitions": 1, "roll": {"max_age": "1h"}}]


def test_records_count_once_sealed_with_segment_durability(tmp_path: Path) -> None:
    config = api_config(tmp_path / "store", TOPICS, durability="segment")
    with listening(config) as (server, bootstrap):
        client = RawClient(bootstrap)
        taken = record_batch([b"a", b"b"])
        answer = answers(client.call(PRODUCE, 9, produce_body("events", 0, taken, acks=1)))
        assert answer[("events", 0)].error_code == ErrorCode.none
        # Answered (the writer took them), not sealed: not stored yet.
        assert server.stats.records == {}
        # acks=all seals the partition, the acks=1 records with it.
        sealed = record_batch([b"c"])
        answer = answers(client.call(PRODUCE, 9, produce_body("events", 0, sealed, acks=-1)))
        assert answer[("events", 0)].base_offset == 2
        client.close()
        assert server.stats.records == {"events": 3}
        assert server.stats.bytes == {"events": len(taken) + len(sealed)}
        assert server.stats.failed_records == {}
