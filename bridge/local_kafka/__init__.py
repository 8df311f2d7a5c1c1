"""A real Apache Kafka broker for development and tests, run from its jars without Docker."""

from bridge.local_kafka.broker import BrokerSettings, BrokerState, LocalKafka, free_port
from bridge.local_kafka.jars import DEFAULT_KAFKA_VERSION, kafka_libs
from plateau_core.cache import default_cache_dir

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "BrokerSettings",
    "BrokerState",
    "LocalKafka",
    "default_cache_dir",
    "free_port",
    "kafka_libs",
]
