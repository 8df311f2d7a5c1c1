"""What every decoder shares: the fixed columns built from Kafka messages, and the result."""

from __future__ import annotations

import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
from confluent_kafka import Message

from plateau_core.schema import HEADERS_TYPE, TIMESTAMP_TYPE

if TYPE_CHECKING:
    from confluent_kafka._types import HeadersType

_stamp_of = operator.itemgetter(1)  # Message.timestamp() is (type, milliseconds)


@dataclass(frozen=True)
class Poison:
    """A message that could not be decoded, with the reason."""

    message: Message
    error: str


@dataclass
class Decoded:
    """Rows to append (one batch per schema, in offset order) and the poison messages."""

    batches: list[pa.RecordBatch] = field(default_factory=list)
    poison: list[Poison] = field(default_factory=list)


class Decoder(Protocol):
    def decode(self, messages: Sequence[Message]) -> Decoded:
        """Decode messages of one partition, given in offset order."""
        ...

    def seed(self, stored: pa.Schema) -> None:
        """The plateau topic's columns so far (from its segments), before the first decode."""
        ...


@dataclass(frozen=True)
class Envelope:
    """What each mapping keeps of the Kafka envelope."""

    keep_key: bool = True
    keep_headers: bool = True


def kafka_timestamps(messages: Sequence[Message]) -> pa.Array:
    """The Kafka timestamps; a record without one (librdkafka says -1) gets the time now."""
    stamps = list(map(_stamp_of, map(Message.timestamp, messages)))
    if stamps and min(stamps) < 0:
        now = int(time.time() * 1000)
        stamps = [now if stamp < 0 else stamp for stamp in stamps]
    return pa.array(stamps, TIMESTAMP_TYPE)


def offset_of(message: Message) -> int:
    offset = message.offset()
    return -1 if offset is None else offset


def header_list(message: Message) -> list[tuple[str, bytes | None]] | None:
    return _header_pairs(message.headers())


def _header_pairs(headers: HeadersType | None) -> list[tuple[str, bytes | None]] | None:
    """Message.headers() as (key, bytes) pairs; None when the message has no headers."""
    if headers is None:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]


def header_array(messages: Sequence[Message]) -> pa.Array:
    raw = list(map(Message.headers, messages))
    if raw.count(None) == len(raw):
        return pa.nulls(len(raw), HEADERS_TYPE)  # the common case, without a loop
    return pa.array(
        [
            None if h is None else [{"key": k, "value": v} for k, v in h]
            for h in map(_header_pairs, raw)
        ],
        HEADERS_TYPE,
    )


def envelope_columns(
    messages: Sequence[Message], envelope: Envelope, *, timestamps: pa.Array | None = None
) -> dict[str, pa.Array]:
    """offset, timestamp, and key/headers if kept: one entry per message.

    Fields are read with map() over the unbound Message methods: the per-message loop then
    runs in C, which is most of the worker's cost per record after consume() itself.
    """
    columns: dict[str, pa.Array] = {
        "offset": pa.array(list(map(Message.offset, messages)), pa.int64()),
        "timestamp": timestamps if timestamps is not None else kafka_timestamps(messages),
    }
    if envelope.keep_key:
        columns["key"] = pa.array(list(map(Message.key, messages)), pa.binary())
    if envelope.keep_headers:
        columns["headers"] = header_array(messages)
    return columns
