"""Kafka client settings shared by the worker, `check` and `status`."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import structlog

from bridge.config.models import Config

log = structlog.get_logger("plateau.librdkafka")

# What the commit order depends on: the passthrough may not change these.
ENFORCED_CONSUMER = {"enable.auto.commit": "false", "enable.auto.offset.store": "false"}


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


class _ToStructlog(logging.Handler):
    """librdkafka's own log lines as DEBUG events: the error callbacks already report what
    matters (rate-limited, without the per-attempt noise of an outage)."""

    def emit(self, record: logging.LogRecord) -> None:
        log.debug("librdkafka_log", level=record.levelname, message=record.getMessage())


def librdkafka_logger() -> logging.Logger:
    """The logger to give confluent-kafka clients instead of their default stderr lines."""
    logger = logging.getLogger("plateau.librdkafka")
    if not logger.handlers:
        logger.addHandler(_ToStructlog())
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    return logger
