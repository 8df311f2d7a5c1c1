"""Decoders turn Kafka messages of one partition into Arrow batches plus poison records."""

from bridge.config.topics import TopicMapping
from bridge.consume.decode.arrow_format import ArrowDecoder
from bridge.consume.decode.common import Decoded, Decoder, Envelope, Poison
from bridge.consume.decode.json_format import JsonDecoder
from bridge.consume.decode.raw import RawDecoder


def decoder_for(mapping: TopicMapping) -> Decoder:
    envelope = Envelope(keep_key=mapping.key == "keep", keep_headers=mapping.headers == "keep")
    field = mapping.timestamp.removeprefix("field:") if mapping.timestamp != "kafka" else None
    if mapping.format == "json":
        return JsonDecoder(envelope, mapping.schema_, field)
    if mapping.format == "arrow":
        return ArrowDecoder(envelope, field)
    return RawDecoder(envelope)


__all__ = ["Decoded", "Decoder", "Envelope", "Poison", "decoder_for"]
