"""Kafka messages of one partition as an envelope batch (bridge.ingest.records).

Fields are read with map() over the unbound Message methods: the per-message loop then runs
in C, which is most of the worker's cost per record after consume() itself.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from confluent_kafka import Message

from bridge.ingest.records import envelope
from plateau_core.schema import HEADERS_TYPE, TIMESTAMP_TYPE

if TYPE_CHECKING:
    from confluent_kafka._types import HeadersType

_stamp_of = operator.itemgetter(1)  # Message.timestamp() is (type, milliseconds)


def records_of(messages: Sequence[Message]) -> pa.RecordBatch:
    """The envelope of `messages` (one partition's, in offset order)."""
    return envelope(
        pa.array(list(map(Message.offset, messages)), pa.int64()),
        kafka_timestamps(messages),
        pa.array(list(map(Message.key, messages)), pa.binary()),
        header_array(messages),
        pa.array(list(map(Message.value, messages)), pa.binary()),
    )


def kafka_timestamps(messages: Sequence[Message]) -> pa.Array:
    """The Kafka timestamps; a record without one (librdkafka says -1) gets the time now."""
    stamps = list(map(_stamp_of, map(Message.timestamp, messages)))
    if stamps and min(stamps) < 0:
        now = int(time.time() * 1000)
        stamps = [now if stamp < 0 else stamp for stamp in stamps]
    return pa.array(stamps, TIMESTAMP_TYPE)


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


def _header_pairs(headers: HeadersType | None) -> list[tuple[str, bytes | None]] | None:
    """Message.headers() as (key, bytes) pairs; None when the message has no headers."""
    if headers is None:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]
