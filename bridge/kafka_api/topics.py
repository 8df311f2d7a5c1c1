"""The topics producers may write to: those the config lists without a source, and those
created through the API (CreateTopics, or a produce when auto_create_topics is on), which
the manifest remembers across restarts."""

from __future__ import annotations

import re

from bridge.config.kafka_api import KafkaApiConfig
from bridge.config.models import Config
from bridge.config.topics import TopicMapping
from plateau_core.errors import InvalidInputError
from plateau_core.manifest import Manifest
from plateau_core.manifest.produced import CONFIG
from plateau_core.names import validate_topic

# Kafka's own rule for topic names; plateau's folder names are a superset.
_KAFKA_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class TopicNameError(ValueError):
    pass


class ProducedTopics:
    def __init__(self, config: Config, api: KafkaApiConfig, manifest: Manifest) -> None:
        self._api = api
        self._manifest = manifest
        self._mappings = {m.name: m for m in config.produced if m.name is not None}
        self._config = config
        self.partitions: dict[str, int] = {}  # the topics producers can write
        # Topics created through the API whose partitions did not open at start: a request
        # naming one opens them again (`unopen`, `add`).
        self.unopened: dict[str, int] = {}
        for name, mapping in self._mappings.items():
            wanted = mapping.partitions or api.default_partitions
            self.partitions[name] = manifest.ensure_produced_topic(name, wanted, CONFIG)
        for name, count in served_topics(config, manifest).items():
            self.partitions.setdefault(name, count)

    def mapping(self, topic: str) -> TopicMapping:
        """The configured mapping, or raw defaults for a topic created through the API."""
        found = self._mappings.get(topic)
        return found if found is not None else TopicMapping(name=topic)

    def configured(self, topic: str) -> bool:
        return topic in self._mappings

    def check_name(self, topic: str) -> None:
        """Raise TopicNameError when `topic` cannot be created through the API."""
        if not _KAFKA_NAME.fullmatch(topic) or topic in (".", ".."):
            raise TopicNameError(f"topic name {topic!r} must be 1-249 characters of [A-Za-z0-9._-]")
        try:
            validate_topic(topic)
        except InvalidInputError as exc:
            raise TopicNameError(str(exc)) from None
        # source_of, not the exact names alone: a regex source lands in topics named after it.
        if self._config.source_of(topic) is not None:
            raise TopicNameError(
                f"{topic!r} is consumed from the Kafka cluster; producers cannot write it here"
            )
        # Its topic's seals write it: records produced to it would take the same offsets, in
        # the same folder, as the roll-up's segments.
        if self._config.rollup_of(topic) is not None:
            raise TopicNameError(
                f"{topic!r} is a roll-up topic the config derives; producers cannot write it"
            )

    def record(self, topic: str, partitions: int | None, created_by: str) -> int:
        """Record a new topic in the manifest; returns its partition count. Producers see it
        once its partitions are open (`add`)."""
        return self._manifest.ensure_produced_topic(
            topic, partitions or self._api.default_partitions, created_by
        )

    def add(self, topic: str, count: int) -> None:
        self.partitions[topic] = count
        self.unopened.pop(topic, None)

    def unopen(self, topic: str) -> None:
        self.unopened[topic] = self.partitions.pop(topic)


def served_topics(config: Config, manifest: Manifest) -> dict[str, int]:
    """The recorded produced topics the Kafka API serves under `config`, with their partition
    counts: all but those the configuration listed once and lists no more. Served on, such a
    topic turned into a `raw` one created through the API, its format and settings gone with
    its mapping; producers get UNKNOWN_TOPIC_OR_PARTITION instead (or, with
    auto_create_topics, create it again as theirs). Its segments stay, kept under
    defaults.retention, until `plateau drop-topic`."""
    listed = {m.name for m in config.produced}
    origins = manifest.produced_topic_origins()
    return {
        topic: count
        for topic, count in manifest.produced_topics().items()
        if topic in listed or origins.get(topic) != CONFIG
    }
