"""Fast bulk production of records: the demo producer, tests and benchmarks share it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer

from bridge.errors import BridgeError
from bridge.logs import librdkafka_logger

Header = tuple[str, bytes]


@dataclass(frozen=True)
class Record:
    """One record to produce; `partition=None` lets the key decide."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    partition: int | None = None
    timestamp_ms: int | None = None


def producer_config(bootstrap_servers: str, **overrides: str | int) -> dict[str, str | int]:
    config: dict[str, str | int] = {
        "bootstrap.servers": bootstrap_servers,
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 500000,
        "compression.type": "lz4",
        "enable.idempotence": "true",
    }
    config.update(overrides)
    return config


def produce(
    bootstrap_servers: str,
    topic: str,
    records: Iterable[Record],
    *,
    flush_timeout_s: float = 60.0,
    **config: str | int,
) -> int:
    """Produce every record, wait until all are acknowledged, return how many were written.

    Raises BridgeError naming the first delivery failure; a full local queue makes it
    wait for deliveries instead of failing.
    """
    # Failures come back as delivery reports (raised below); librdkafka's own lines, such as
    # a fresh broker's "coordinator load in progress", go to the debug log.
    producer = Producer(producer_config(bootstrap_servers, **config), logger=librdkafka_logger())
    failures: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None and len(failures) < 5:
            failures.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    count = 0
    try:
        for record in records:
            while True:
                try:
                    producer.produce(
                        topic,
                        value=record.value,
                        key=record.key,
                        partition=-1 if record.partition is None else record.partition,
                        timestamp=record.timestamp_ms or 0,
                        headers=list(record.headers) or None,
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    # The local queue is full: serve delivery reports until there is room.
                    producer.poll(0.05)
            count += 1
            if count % 10000 == 0:
                producer.poll(0)
        remaining = producer.flush(flush_timeout_s)
        if remaining:
            raise BridgeError(
                f"{remaining} records to {topic!r} not delivered in {flush_timeout_s}s"
            )
        if failures:
            raise BridgeError(f"delivery to {topic!r} failed: {'; '.join(failures)}")
    finally:
        # A traceback holding this frame would keep the client (and its reconnects) alive.
        del producer
    return count
