"""The real broker works end to end: produce keyed records, consume them in a group, commit."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from bridge.demo.producer import Record, produce

RECORDS = 10_000
PARTITIONS = 3


def test_produce_consume_commit_every_offset(kafka: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    sent = {f"value-{i}".encode(): f"key-{i % 101}".encode() for i in range(RECORDS)}
    assert produce(kafka, topic, (Record(value=v, key=k) for v, k in sent.items())) == RECORDS

    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"smoke-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        offsets: dict[int, list[int]] = defaultdict(list)
        received: dict[bytes, bytes] = {}
        key_partition: dict[bytes, int] = {}
        deadline = time.monotonic() + 60
        while len(received) < RECORDS and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=2000, timeout=1.0):
                assert msg.error() is None, msg.error()
                key, value, partition = msg.key(), msg.value(), msg.partition()
                assert key is not None and value is not None and partition is not None
                assert value not in received, f"duplicate record {value!r}"
                received[value] = key
                offsets[partition].append(msg.offset())
                # Keyed records always land in the same partition.
                assert key_partition.setdefault(key, partition) == partition
        assert received == sent
        consumer.commit(asynchronous=False)

        assert sorted(offsets) == list(range(PARTITIONS))
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = consumer.committed(partitions, timeout=10)
        total = 0
        for tp in committed:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            assert offsets[tp.partition] == list(range(low, high)), "offsets are not contiguous"
            assert tp.offset == high, f"partition {tp.partition} committed {tp.offset}, end {high}"
            total += high - low
        assert total == RECORDS
    finally:
        consumer.close()
