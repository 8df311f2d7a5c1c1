"""How each assigned Kafka topic lands: its mapping, its plateau topic and its decoder."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import structlog

from bridge.config.models import Config
from bridge.config.topics import TopicMapping
from bridge.errors import BridgeError
from bridge.ingest.decode import Decoder, decoder_for
from plateau_core.errors import InvalidInputError
from plateau_core.manifest import Manifest
from plateau_core.names import validate_topic
from plateau_core.schema_merge import merged_schema

log = structlog.get_logger(__name__)


@dataclass
class Route:
    """How records of one source topic land."""

    mapping: TopicMapping
    plateau_topic: str
    decoder: Decoder


class Routes:
    """Routes by source topic, made when a topic's first partition is assigned."""

    def __init__(self, config: Config, manifest: Manifest) -> None:
        self.config = config
        self.manifest = manifest
        self._by_source: dict[str, Route] = {}
        self._sources: dict[str, str] = {}  # plateau topic -> source topic

    def route(self, source: str) -> Route:
        """The route of `source`, made on first use; raises BridgeError when no mapping
        matches it or its plateau topic is not a usable name."""
        route = self._by_source.get(source)
        if route is None:
            route = self._make(source)
            self._by_source[source] = route
            self._sources[route.plateau_topic] = source
        return route

    def known(self, source: str) -> Route:
        """The route of a source whose partitions are assigned (made by then)."""
        return self._by_source[source]

    def source_of(self, plateau_topic: str) -> str | None:
        return self._sources.get(plateau_topic)

    def _make(self, source: str) -> Route:
        mapping = self.config.mapping_for(source)
        if mapping is None:
            raise BridgeError(f"no topic mapping matches the assigned topic {source!r}")
        plateau_topic = mapping.plateau_topic(source)
        try:
            validate_topic(plateau_topic)
        except InvalidInputError as exc:
            index = self.config.topics.index(mapping)
            raise BridgeError(
                f"topics.{index}.name {mapping.name!r} lands Kafka topic {source!r} in "
                f"{plateau_topic!r}, which is not a usable plateau topic: {exc}"
            ) from None
        route = Route(mapping, plateau_topic, decoder_for(mapping, self.config.schema_registry))
        self._seed(route)
        return route

    def _seed(self, route: Route) -> None:
        """Give the decoder the columns the topic already has, so inferred json types
        widen from them instead of starting over."""
        stored = self.manifest.schemas(route.plateau_topic)
        if not stored:
            return
        try:
            merged = merged_schema(stored.values())
        except InvalidInputError as exc:
            log.warning("stored_schemas_disagree", topic=route.plateau_topic, error=str(exc))
            return
        if merged.clashes:
            # Those columns read as text: the decoder goes on from the types it sees itself.
            log.warning(
                "stored_schemas_disagree", topic=route.plateau_topic, columns=list(merged.clashes)
            )
        try:
            route.decoder.seed(merged.settled())
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            log.warning("stored_schemas_disagree", topic=route.plateau_topic, error=str(exc))
