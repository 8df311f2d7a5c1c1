"""`plateau check`: the configuration is valid, the store is writable, the brokers answer
(when topics are consumed), the Kafka API's address is free and its TLS files load (when
it is configured), the schema registry answers (when a topic uses it)."""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.schema_registry import SchemaRegistryClient

from bridge.config.models import Config
from bridge.consume.client import client_config
from bridge.errors import BridgeError
from bridge.kafka_api.tls import server_context
from bridge.ops import ANSWER_TIMEOUT_S


def check(config: Config, timeout_s: float = ANSWER_TIMEOUT_S) -> list[str]:
    """Lines describing what was checked; raises BridgeError with the reason on failure."""
    report = [f"configuration valid: {len(config.topics)} topic mapping(s)"]
    report.append(_check_data_dir(config.storage.data_dir))
    if config.kafka_api is not None:
        report += _check_listener(config)
    if config.schema_registry is not None:
        report.append(_check_registry(config, timeout_s))
    if not config.consumed:
        report.append("kafka: no topic is consumed, so no cluster is needed")
        return report
    report += _check_kafka(config, timeout_s)
    return report


def _check_registry(config: Config, timeout_s: float) -> str:
    registry = config.schema_registry
    assert registry is not None
    settings = {**registry.client_settings(), "timeout": min(registry.timeout, timeout_s)}
    try:
        subjects = SchemaRegistryClient(settings).get_subjects()
    except Exception as exc:  # any failure of the request is the answer to report
        raise BridgeError(
            f"schema registry {registry.shown_url} does not answer: {type(exc).__name__}: {exc}"
        ) from None
    return f"schema registry {registry.shown_url} answers: {len(subjects)} subject(s)"


def _check_kafka(config: Config, timeout_s: float) -> list[str]:
    report: list[str] = []
    errors: list[KafkaError] = []
    # librdkafka's own log lines would repeat each failed attempt on stderr; the reason
    # reaches the error message through error_cb instead.
    settings: dict[str, Any] = client_config(
        config, defaults={"log_level": 0}, enforced={"group.id": config.kafka.group_id}
    )
    settings["error_cb"] = errors.append
    try:
        consumer = Consumer(settings)
    except KafkaException as exc:
        raise BridgeError(f"kafka: the client refused its settings: {exc.args[0]}") from None
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                metadata = consumer.list_topics(
                    timeout=max(0.1, min(1.0, deadline - time.monotonic()))
                )
                break
            except KafkaException as exc:
                consumer.poll(0)  # serves error_cb
                refused = [e for e in errors if e.code() in _REFUSALS]
                if refused:
                    # Retrying cannot help a wrong password or an untrusted certificate.
                    raise BridgeError(
                        f"kafka: {_REFUSALS[refused[-1].code()]} at "
                        f"{config.kafka.bootstrap_servers}: {refused[-1].str()}"
                    ) from None
                if time.monotonic() >= deadline:
                    raise BridgeError(_no_answer(config, timeout_s, exc, errors)) from None
    finally:
        consumer.close()
    report.append(
        f"kafka: {config.kafka.bootstrap_servers} answered ({len(metadata.brokers)} broker(s))"
    )
    for mapping in config.consumed:
        matched = sorted(t for t in metadata.topics if mapping.matches(t))
        if matched:
            report.append(f"topic {mapping.source}: found {', '.join(matched)}")
        else:
            report.append(f"topic {mapping.source}: not found yet (consumed once created)")
    for dlq in sorted({m.dlq for m in config.consumed if m.on_error == "dlq" and m.dlq}):
        if dlq in metadata.topics:
            report.append(f"dead-letter topic {dlq}: found")
        else:
            # A dead letter the cluster refuses stops the worker at the first record that
            # does not decode, long after a check that said nothing.
            report.append(
                f"dead-letter topic {dlq}: not found: create it (plateau does not), unless the "
                "cluster creates topics on first use; a dead letter it refuses stops the worker"
            )
    return report


_REFUSALS = {
    KafkaError._AUTHENTICATION: "authentication failed",
    KafkaError._SSL: "TLS handshake failed",
}


def _no_answer(
    config: Config, timeout_s: float, exc: KafkaException, errors: list[KafkaError]
) -> str:
    message = (
        f"kafka: no answer from {config.kafka.bootstrap_servers} within {timeout_s:g}s: "
        f"{exc.args[0]}"
    )
    telling = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    if telling:
        return f"{message}; last error: {telling[-1].str()}"
    # A broker that closes the connection without a word is typically a TLS or SASL
    # listener spoken to in plaintext.
    return f"{message} (is security.protocol the one this listener expects?)"


def _check_data_dir(data_dir: Path) -> str:
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".check-"):
            pass
    except OSError as exc:
        raise BridgeError(f"storage.data_dir {data_dir} is not writable: {exc}") from None
    return f"storage: {data_dir} is writable"


def _check_listener(config: Config) -> list[str]:
    """The Kafka API's address can be bound (nothing else holds it) and its TLS material
    loads, so that serve does not fail on them at start."""
    api = config.kafka_api
    assert api is not None
    host, port = api.address
    try:
        with socket.socket(
            socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM
        ) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise BridgeError(
            f"kafka_api.listen {api.listen} cannot be bound (is serve already running?): {exc}"
        ) from None
    report = [f"kafka api: {api.listen} is free"]
    if api.tls is not None:
        server_context(api.tls)
        report.append(f"kafka api: TLS certificate {api.tls.certfile} loads")
    produced = ", ".join(m.name or "" for m in config.produced) or "none yet"
    report.append(f"kafka api: produced topics: {produced}")
    return report
