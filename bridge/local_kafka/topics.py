"""Kafka topic administration used by the CLI, the demo and the tests."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bridge.errors import BridgeError


def create_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int,
    *,
    config: Mapping[str, str] | None = None,
    exist_ok: bool = False,
    timeout_s: float = 30.0,
) -> None:
    """Create `name` with `partitions` partitions (replication factor 1) and wait for it."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    topic = NewTopic(
        name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
    )
    future = admin.create_topics([topic], operation_timeout=timeout_s)[name]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        if (
            exist_ok
            and isinstance(error, KafkaError)
            and error.code() == KafkaError.TOPIC_ALREADY_EXISTS
        ):
            return
        raise BridgeError(f"cannot create topic {name!r}: {error}") from exc
    _wait_for_leaders(admin, name, partitions, timeout_s)


def _wait_for_leaders(admin: AdminClient, name: str, partitions: int, timeout_s: float) -> None:
    # create_topics returns before every partition has a leader; producing then fails.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise BridgeError(f"topic {name!r} has no leader for every partition after {timeout_s}s")
