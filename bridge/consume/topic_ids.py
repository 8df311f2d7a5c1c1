"""Source topics' ids (KIP-516), asked of the cluster once per assignment: a topic deleted
and created again gets a new one, while its offsets can look like the old topic's."""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import TimeoutError as FutureTimeout

import structlog
from confluent_kafka import KafkaException, TopicCollection, Uuid
from confluent_kafka.admin import AdminClient

from bridge.config.models import Config
from bridge.consume.client import client_config
from bridge.logs import librdkafka_logger

log = structlog.get_logger(__name__)

ASK_TIMEOUT_S = 10.0
# What a broker older than 2.8 (no topic ids yet) answers.
NO_ID = str(Uuid(0, 0))


class TopicIds:
    """Asks the cluster for topic ids, with an admin client made for each question: kept
    between assignments, it would hold connections, and its log lines (served only by its
    poll) would pile up meanwhile."""

    def __init__(self, config: Config, client_id: str) -> None:
        self._settings: dict[str, str | int | float | bool] = {
            **client_config(config, {"client.id": client_id})
        }

    def of(self, topics: Collection[str]) -> dict[str, str]:
        """The id of each topic the cluster describes; a topic it cannot describe now (its
        id unknown, a broker before 2.8, an error) is left out, and is not checked."""
        if not topics:
            return {}
        try:
            admin = AdminClient(self._settings, logger=librdkafka_logger())
            futures = admin.describe_topics(
                TopicCollection(sorted(topics)), request_timeout=ASK_TIMEOUT_S
            )
        except (KafkaException, ValueError) as exc:
            log.warning("source_topic_id_unknown", topics=sorted(topics), error=str(exc))
            return {}
        found: dict[str, str] = {}
        for topic, future in futures.items():
            try:
                described = future.result(timeout=ASK_TIMEOUT_S + 5)
            except (KafkaException, FutureTimeout) as exc:
                log.warning("source_topic_id_unknown", topic=topic, error=str(exc) or "timed out")
                continue
            if described.topic_id is not None and str(described.topic_id) != NO_ID:
                found[topic] = str(described.topic_id)
        admin.poll(0)  # its log lines, to the logger
        return found
