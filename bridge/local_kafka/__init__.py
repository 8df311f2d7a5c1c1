"""A real Apache Kafka broker for development and tests, run from its jars without Docker.

The names below load their modules when first used: the command line reads the default
Kafka version without loading the broker's client libraries.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.local_kafka.broker import BrokerSettings, BrokerState, LocalKafka
    from bridge.local_kafka.jars import DEFAULT_KAFKA_VERSION, kafka_libs
    from bridge.local_kafka.processes import free_port
    from plateau_core.cache import default_cache_dir

_HOMES = {
    "BrokerSettings": "bridge.local_kafka.broker",
    "BrokerState": "bridge.local_kafka.broker",
    "LocalKafka": "bridge.local_kafka.broker",
    "free_port": "bridge.local_kafka.processes",
    "DEFAULT_KAFKA_VERSION": "bridge.local_kafka.jars",
    "kafka_libs": "bridge.local_kafka.jars",
    "default_cache_dir": "plateau_core.cache",
}

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "BrokerSettings",
    "BrokerState",
    "LocalKafka",
    "default_cache_dir",
    "free_port",
    "kafka_libs",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'bridge.local_kafka' has no attribute {name!r}")
    return getattr(import_module(home), name)
