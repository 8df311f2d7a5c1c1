"""Decoders turn a partition's records (an envelope batch) into the rows its topic stores,
plus the poison records that did not decode."""

from bridge.config.topics import TopicMapping
from bridge.ingest.decode.arrow_format import ArrowDecoder
from bridge.ingest.decode.common import Decoded, Decoder, Poison
from bridge.ingest.decode.json_format import JsonDecoder
from bridge.ingest.decode.raw import RawDecoder
from bridge.ingest.records import Kept


def decoder_for(mapping: TopicMapping) -> Decoder:
    kept = Kept(key=mapping.key == "keep", headers=mapping.headers == "keep")
    field = (
        mapping.timestamp.removeprefix("field:") if mapping.timestamp.startswith("field:") else None
    )
    if mapping.format == "json":
        return JsonDecoder(kept, mapping.schema_, field)
    if mapping.format == "arrow":
        return ArrowDecoder(kept, field)
    return RawDecoder(kept)


__all__ = ["Decoded", "Decoder", "Poison", "decoder_for"]
