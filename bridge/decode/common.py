"""What every decoder shares: the fixed columns built from Kafka messages, and the result."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from plateau_core.schema import HEADERS_TYPE, TIMESTAMP_TYPE


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


@dataclass(frozen=True)
class Envelope:
    """What each mapping keeps of the Kafka envelope."""

    keep_key: bool = True
    keep_headers: bool = True


def kafka_timestamps(messages: Sequence[Message]) -> list[int]:
    now = int(time.time() * 1000)
    out = []
    for m in messages:
        kind, stamp = m.timestamp()
        out.append(now if kind == TIMESTAMP_NOT_AVAILABLE or stamp < 0 else stamp)
    return out


def offset_of(message: Message) -> int:
    offset = message.offset()
    return -1 if offset is None else offset


def header_list(message: Message) -> list[tuple[str, bytes | None]] | None:
    headers = message.headers()
    if headers is None:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]


def header_array(messages: Sequence[Message]) -> pa.Array:
    return pa.array(
        [
            None if h is None else [{"key": k, "value": v} for k, v in h]
            for h in (header_list(m) for m in messages)
        ],
        HEADERS_TYPE,
    )


def envelope_columns(
    messages: Sequence[Message], envelope: Envelope, *, timestamps: pa.Array | None = None
) -> dict[str, pa.Array]:
    """offset, timestamp, and key/headers if kept: one entry per message."""
    columns: dict[str, pa.Array] = {
        "offset": pa.array([m.offset() for m in messages], pa.int64()),
        "timestamp": timestamps
        if timestamps is not None
        else pa.array(kafka_timestamps(messages), TIMESTAMP_TYPE),
    }
    if envelope.keep_key:
        columns["key"] = pa.array([m.key() for m in messages], pa.binary())
    if envelope.keep_headers:
        columns["headers"] = header_array(messages)
    return columns
