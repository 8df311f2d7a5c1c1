"""Decoders turn a partition's records (an envelope batch) into the rows its topic stores,
plus the poison records that did not decode."""

from bridge.config.registry import SchemaRegistryConfig
from bridge.config.topics import TopicMapping
from bridge.ingest.decode.arrow_format import ArrowDecoder
from bridge.ingest.decode.common import Decoded, Decoder, Poison
from bridge.ingest.decode.json_format import JsonDecoder
from bridge.ingest.decode.raw import RawDecoder
from bridge.ingest.decode.registry import RegistryUnavailableError, schema_source
from bridge.ingest.decode.schema_format import SchemaDecoder
from bridge.ingest.records import Kept


def decoder_for(mapping: TopicMapping, registry: SchemaRegistryConfig | None = None) -> Decoder:
    """The decoder of a topic; `registry` is required when the topic uses a schema-registry
    format (the configuration refuses such a topic without one)."""
    kept = Kept(key=mapping.key == "keep", headers=mapping.headers == "keep")
    field = (
        mapping.timestamp.removeprefix("field:") if mapping.timestamp.startswith("field:") else None
    )
    if mapping.uses_registry:
        if registry is None:
            raise ValueError(f"topic {mapping.topic or mapping.source} needs schema_registry")
        return SchemaDecoder(
            kept, schema_source(registry), mapping.format, mapping.key_format, field
        )
    if mapping.format == "json":
        return JsonDecoder(kept, mapping.schema_, field, topic=mapping.topic)
    if mapping.format == "arrow":
        return ArrowDecoder(kept, field)
    return RawDecoder(kept)


__all__ = ["Decoded", "Decoder", "Poison", "RegistryUnavailableError", "decoder_for"]
