"""Write a few records to plateau's Kafka API with confluent-kafka, as to any Kafka broker.

    .venv/bin/plateau serve --config examples/produce-direct/plateau.yaml   # in another shell
    .venv/bin/python examples/produce-direct/produce.py [--bootstrap 127.0.0.1:9092]

Each record's delivery report is checked: a record counts as stored only once plateau
acknowledged it, and with acks=all that means it is synced to plateau's journal.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer

EVENTS_TOPIC = "app-events"
RAW_TOPIC = "audit-raw"

# Keyed by service: records of one key go to one partition, in order, as with Kafka.
EVENTS = [
    {"service": "checkout", "level": "info", "request_id": "r-1", "latency_ms": 12.5},
    {"service": "search", "level": "error", "request_id": "r-2", "latency_ms": 830.0},
    {"service": "checkout", "level": "error", "request_id": "r-3", "latency_ms": 41.0},
    {"service": "auth", "level": "info", "request_id": "r-4", "latency_ms": 3.2},
]
# Not a JSON object: app-events takes the rest of its batch and sends this one to its
# dead-letter topic, so the producer still gets a successful delivery report for it.
NOT_JSON = b"checkout: timeout talking to payments"
AUDIT_LINES = [b"user 17 logged in", b"user 17 changed their e-mail"]


@dataclass(frozen=True)
class Delivered:
    """A record plateau acknowledged, with the partition and offset it answered."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


def producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            # A batch sent again after a lost answer or a reconnect (or a restart of plateau)
            # is stored once: plateau keeps each producer's sequence numbers in its manifest.
            "enable.idempotence": True,
            "acks": "all",
            # A record not acknowledged within this long is reported as failed, never dropped
            # silently.
            "delivery.timeout.ms": 30_000,
            "linger.ms": 5,
        }
    )


def produce(bootstrap: str, timeout_s: float = 30.0) -> list[Delivered]:
    """Send the sample records; returns them as acknowledged, or raises naming the failures."""
    delivered: list[Delivered] = []
    failed: list[str] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        # Called from flush()/poll() in this thread, once per record.
        if err is not None:
            failed.append(f"{msg.topic()}: {err.str()}")
            return
        delivered.append(
            Delivered(
                str(msg.topic()),
                int(msg.partition()),
                int(msg.offset()),
                msg.key(),
                msg.value() or b"",
            )
        )

    client = producer(bootstrap)
    for i, event in enumerate(EVENTS):
        client.produce(
            EVENTS_TOPIC,
            key=event["service"].encode(),
            value=json.dumps(event).encode(),
            headers=[("request-id", event["request_id"].encode()), ("attempt", b"1")],
            on_delivery=report,
        )
        if i == 2:
            client.produce(EVENTS_TOPIC, key=b"checkout", value=NOT_JSON, on_delivery=report)
    for line in AUDIT_LINES:
        client.produce(RAW_TOPIC, value=line, headers=[("source", b"auth")], on_delivery=report)
    unsent = client.flush(timeout_s)
    if unsent or failed:
        raise RuntimeError(f"{unsent} record(s) unanswered, failures: {failed}")
    return delivered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="plateau's kafka_api.listen")
    args = parser.parse_args(argv)
    try:
        records = produce(args.bootstrap)
    except RuntimeError as exc:
        print(f"not stored: {exc}", file=sys.stderr)
        return 1
    for record in records:
        print(f"{record.topic}[{record.partition}] offset {record.offset}: {record.value!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
