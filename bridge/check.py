"""`plateau check`: the configuration is valid, the store is writable, the brokers answer."""

from __future__ import annotations

import tempfile
from pathlib import Path

from confluent_kafka import Consumer, KafkaException

from bridge.config.models import Config
from bridge.errors import BridgeError
from bridge.kafka_client import client_config


def check(config: Config, timeout_s: float = 10.0) -> list[str]:
    """Lines describing what was checked; raises BridgeError with the reason on failure."""
    report = [f"configuration valid: {len(config.topics)} topic mapping(s)"]
    report.append(_check_data_dir(config.storage.data_dir))
    try:
        consumer = Consumer(
            client_config(config, enforced={"group.id": config.kafka.group_id}), logger=None
        )
    except KafkaException as exc:
        raise BridgeError(f"kafka: the client refused its settings: {exc.args[0]}") from None
    try:
        metadata = consumer.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BridgeError(
            f"kafka: no answer from {config.kafka.bootstrap_servers} within {timeout_s:.0f}s: "
            f"{exc.args[0]}"
        ) from None
    finally:
        consumer.close()
    report.append(
        f"kafka: {config.kafka.bootstrap_servers} answered ({len(metadata.brokers)} broker(s))"
    )
    for mapping in config.topics:
        matched = sorted(t for t in metadata.topics if mapping.matches(t))
        if matched:
            report.append(f"topic {mapping.source}: found {', '.join(matched)}")
        else:
            report.append(f"topic {mapping.source}: not found yet (consumed once created)")
    return report


def _check_data_dir(data_dir: Path) -> str:
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".check-"):
            pass
    except OSError as exc:
        raise BridgeError(f"storage.data_dir {data_dir} is not writable: {exc}") from None
    return f"storage: {data_dir} is writable"
