"""Kafka client settings shared by the worker, `check` and `status`."""

from __future__ import annotations

from collections.abc import Mapping

from bridge.config.models import Config

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
