"""Dead letters: poison records go to a DLQ topic with their original bytes and the reason."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import structlog
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from bridge.errors import BridgeError
from bridge.ingest.decode import Poison
from bridge.ingest.records import ERROR_HEADERS, KEY, TIMESTAMP, VALUE, header_pairs
from bridge.logs import librdkafka_logger

log = structlog.get_logger(__name__)


class DeadLetters:
    """Sends poison records and waits until they are acknowledged, before offsets move on."""

    def __init__(self, producer_config: dict[str, str | int]) -> None:
        self._config = producer_config
        self._producer: Producer | None = None

    def send(
        self,
        dlq_topic: str,
        source: tuple[str, int],
        records: pa.RecordBatch,
        poison: Sequence[Poison],
        timeout_s: float = 30.0,
    ) -> None:
        """Produce the poison `records` of the Kafka partition `source` and flush; raises
        BridgeError if any record was not delivered."""
        if not poison:
            return
        if self._producer is None:
            self._producer = Producer(self._config, logger=librdkafka_logger())
        failures: list[str] = []
        topic, partition = source

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failures.append(str(err))

        values = records.column(VALUE)
        keys = records.column(KEY)
        stamps = records.column(TIMESTAMP).cast(pa.int64())
        for item in poison:
            headers: list[tuple[str, str | bytes | None]] = list(header_pairs(records, item.row))
            headers += [
                (ERROR_HEADERS[0], topic.encode()),
                (ERROR_HEADERS[1], str(partition).encode()),
                (ERROR_HEADERS[2], str(item.offset).encode()),
                (ERROR_HEADERS[3], item.error.encode()),
            ]
            stamp = stamps[item.row].as_py()
            try:
                self._producer.produce(
                    dlq_topic,
                    value=values[item.row].as_py(),
                    key=keys[item.row].as_py(),
                    headers=headers,
                    timestamp=stamp if stamp > 0 else 0,
                    on_delivery=delivered,
                )
            except (KafkaException, BufferError) as exc:
                raise BridgeError(
                    f"cannot send {topic}[{partition}] offset {item.offset} to the "
                    f"dead-letter topic {dlq_topic!r}: {exc}"
                ) from None
        remaining = self._producer.flush(timeout_s)
        if remaining or failures:
            raise BridgeError(
                f"{remaining} dead letters to {dlq_topic!r} not delivered in {timeout_s}s"
                if remaining
                else f"dead letters to {dlq_topic!r} failed: {failures[0]}"
            )
        for item in poison:  # said once the dead-letter topic has them, not before
            log.warning(
                "record_dead_lettered",
                topic=topic,
                partition=partition,
                offset=item.offset,
                dlq=dlq_topic,
                error=item.error,
            )

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            # Dropping the last reference destroys the client: no reconnect attempts linger
            # after the worker stopped.
            self._producer = None
