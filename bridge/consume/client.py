"""Kafka client settings shared by the worker, its dead-letter producer, `check` and `status`;
the worker's consumer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypedDict

from confluent_kafka import Consumer, KafkaError, TopicPartition

from bridge.config.models import COOPERATIVE, Config
from bridge.logs import librdkafka_logger

# What the commit order depends on: the passthrough may not change these.
ENFORCED_CONSUMER = {"enable.auto.commit": "false", "enable.auto.offset.store": "false"}


def consumer_settings(config: Config, client_id: str) -> dict[str, str | int]:
    """A worker's consumer: plateau's defaults, the passthrough, then what the commit order
    needs. A `group.instance.id` in the config is suffixed with the worker's client id
    (`<id>-plateau-worker-<n>`): every worker of a node reads the one config, and two members
    under one instance id would fence each other out of the group."""
    kafka = config.kafka
    passthrough = kafka.librdkafka()
    defaults: dict[str, str | int] = {
        "partition.assignment.strategy": COOPERATIVE,
        # Regex mappings see topics created later within this interval.
        "topic.metadata.refresh.interval.ms": 10_000,
        "client.id": client_id,
        # librdkafka stops fetching while its queue holds queued.min.messages and then
        # waits fetch.queue.backoff.ms (1 s by default) before looking again; a Python
        # consumer drains that queue in a fraction of that, so with the default it idles
        # most of the time (about 150k records/s instead of over 500k on one core).
        "fetch.queue.backoff.ms": 10,
        # Broker connection states for /readyz (ClientHealth), and fetchers reset past what
        # the worker has taken (OffsetChecks).
        "statistics.interval.ms": 5000,
    }
    enforced: dict[str, str | int] = {
        "group.id": kafka.group_id,
        "auto.offset.reset": kafka.auto_offset_reset,
        "isolation.level": kafka.isolation_level,
        **ENFORCED_CONSUMER,
    }
    instance = passthrough.get("group.instance.id")
    if instance is not None:
        enforced["group.instance.id"] = f"{instance}-{client_id}"
    if passthrough.get("group.protocol") == "consumer":
        # KIP-848's protocol assigns on the broker (incrementally too) and refuses a client
        # that names an assignor.
        del defaults["partition.assignment.strategy"]
    return client_config(config, defaults, enforced)


class ConsumerCallbacks(TypedDict):
    """What librdkafka calls back on the worker's thread (from consume()). A Consumer takes
    them only when it is created, so the worker hands them to its ConsumerFactory."""

    on_commit: Callable[[KafkaError | None, list[TopicPartition]], None]
    error_cb: Callable[[KafkaError], None]
    stats_cb: Callable[[str], None]


ConsumerFactory = Callable[[ConsumerCallbacks], Consumer]


def new_consumer(config: Config, client_id: str, callbacks: ConsumerCallbacks) -> Consumer:
    """A worker's Kafka consumer (consumer_settings), calling back `callbacks`."""
    return Consumer(
        {**consumer_settings(config, client_id), **callbacks}, logger=librdkafka_logger()
    )


def dead_letter_settings(config: Config) -> dict[str, str | int]:
    """The producer that sends poison records to their dead-letter topic."""
    defaults: dict[str, str | int] = {
        "linger.ms": 5,
        # A poison record is as large as the source topic allowed; librdkafka's 1 MB
        # default would refuse a bigger one before the DLQ's broker is even asked.
        "message.max.bytes": 1_000_000_000,
    }
    return client_config(config, defaults, {"enable.idempotence": "true"})


def client_config(
    config: Config,
    defaults: Mapping[str, str | int] | None = None,
    enforced: Mapping[str, str | int] | None = None,
) -> dict[str, str | int]:
    """bootstrap.servers and `defaults`, then the librdkafka passthrough from the config file
    (security settings and tuning), then `enforced` which nothing overrides."""
    merged: dict[str, str | int] = {"bootstrap.servers": config.kafka.bootstrap_servers}
    merged.update(defaults or {})
    merged.update(config.kafka.librdkafka())
    merged.update(enforced or {})
    return merged
