"""Produce requests read in place: each partition's records are a memoryview of the frame,
not a copy.

kio's reader copied every partition's records into fresh memory that then stayed until the
seal: with the bounds walk before it, 83-88 us of the listener's CPU per request of 8 batches
of 16 KiB, where this reader takes 23-24 us (docs/benchmarks.md, the Kafka API). It reads
the same two layouts (v3-v8, and the flexible v9-v12) in one bounds-checked pass and gives
the values kio's entities carry (field names, None for null records, the timeout as a
timedelta); it refuses what the bounds walk and kio's reader refuse together, and a null
topic or partition array, which kio reads as None. kio
remains the reference: tests/kafka_api/test_produce_request.py and the fuzz target check it
against kio's path.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass
from typing import NamedTuple

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
FLEXIBLE_FROM = 9  # Produce v9 on: compact lengths, tagged fields, request header v2
_CLIENT_ID_AT = 8  # after api key, api version and correlation id
_VARINT_BYTES = 5  # kio reads unsigned varints of at most five bytes


class ProduceRequestError(ValueError):
    """A Produce request that does not read; the connection is closed."""


@dataclass(slots=True)
class PartitionData:  # not a NamedTuple: its field `index` would hide tuple.index
    index: int
    records: memoryview | None  # a view of the frame, which it keeps alive


class TopicData(NamedTuple):
    name: str
    partition_data: tuple[PartitionData, ...]


class ProduceRequest(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout: datetime.timedelta
    topic_data: tuple[TopicData, ...]


class _Reader:
    """A cursor over the frame that reads nothing past its end."""

    __slots__ = ("at", "data", "end", "flexible", "view")

    def __init__(self, frame: bytes | bytearray | memoryview, flexible: bool) -> None:
        # Read-only, whatever the frame: the records were checked as they are now.
        self.view = memoryview(frame).toreadonly()
        self.data = frame
        self.at = _CLIENT_ID_AT
        self.end = len(frame)
        self.flexible = flexible

    def uvarint(self) -> int:
        data, at, end = self.data, self.at, self.end
        if at < end and data[at] < 0x80:  # most are one byte: counts, tags, short names
            self.at = at + 1
            return int(data[at])
        value = shift = 0
        for _ in range(_VARINT_BYTES):
            if at >= end:
                raise ProduceRequestError("a varint runs past the frame")
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.at = at
                return value
            shift += 7
        raise ProduceRequestError("a varint is longer than five bytes")

    def fixed(self, layout: struct.Struct) -> int:
        at = self.at
        if layout.size > self.end - at:
            raise ProduceRequestError("the frame ends inside a field")
        self.at = at + layout.size
        return int(layout.unpack_from(self.data, at)[0])

    def length(self, what: str, *, nullable: bool, legacy: struct.Struct) -> int:
        """A string's or bytes' length, checked against what the frame has left; -1: null."""
        size = self.uvarint() - 1 if self.flexible else self.fixed(legacy)
        if size < -1:
            raise ProduceRequestError(f"{what}: a negative length ({size})")
        if size == -1 and not nullable:
            raise ProduceRequestError(f"{what}: null, which it may not be")
        if size > self.end - self.at:
            raise ProduceRequestError(
                f"{what}: {size} bytes claimed, {self.end - self.at} left in the frame"
            )
        return size

    def string(self, what: str, *, nullable: bool) -> str | None:
        size = self.length(what, nullable=nullable, legacy=_I16)
        if size < 0:
            return None
        at = self.at
        self.at = at + size
        try:
            return str(self.view[at : at + size], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProduceRequestError(f"{what} is not UTF-8: {exc}") from None

    def count(self, what: str) -> int:
        """An array's element count, at most the bytes left (each element takes one at
        least). Produce's arrays are never null (Kafka's schema gives them no null
        versions, and a broker refuses the request): kio reads one as None, which no
        handler could answer."""
        count = self.uvarint() - 1 if self.flexible else self.fixed(_I32)
        if count == -1:
            raise ProduceRequestError(f"{what}: null, which it may not be")
        if count < -1:
            raise ProduceRequestError(f"{what}: a negative count ({count})")
        if count > self.end - self.at:
            raise ProduceRequestError(
                f"{what}: {count} elements claimed, {self.end - self.at} bytes left in the frame"
            )
        return count

    def no_tags(self, entity: str) -> None:
        """A flexible entity's tagged fields: Produce defines none, so any is refused."""
        if self.flexible and self.uvarint():
            raise ProduceRequestError(f"a tagged field that is not part of {entity}")


def read_produce(
    frame: bytes | bytearray | memoryview, version: int
) -> tuple[str | None, ProduceRequest]:
    """The client id of the request header and the Produce request of `version` (3-12) in
    `frame` (without its size prefix). Bytes after the request are left alone, as kio's path
    leaves them. Raises ProduceRequestError when it does not read."""
    flexible = version >= FLEXIBLE_FROM
    reader = _Reader(frame, flexible=False)
    # The header's client id is a legacy string in both header versions.
    client_id = reader.string("client_id", nullable=True)
    reader.flexible = flexible
    reader.no_tags("RequestHeader")
    transactional_id = reader.string("transactional_id", nullable=True)
    if _ACKS_TIMEOUT.size > reader.end - reader.at:
        raise ProduceRequestError("the frame ends inside a field")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, reader.at)
    reader.at += _ACKS_TIMEOUT.size
    topic_data = tuple([_topic(reader) for _ in range(reader.count("topic_data"))])
    reader.no_tags("ProduceRequest")
    body = ProduceRequest(
        transactional_id, acks, datetime.timedelta(milliseconds=timeout_ms), topic_data
    )
    return client_id, body


def _topic(reader: _Reader) -> TopicData:
    name = reader.string("name", nullable=False)
    assert name is not None
    partitions = tuple([_partition(reader) for _ in range(reader.count("partition_data"))])
    reader.no_tags("TopicProduceData")
    return TopicData(name, partitions)


def _partition(reader: _Reader) -> PartitionData:
    index = reader.fixed(_I32)
    size = reader.length("records", nullable=True, legacy=_I32)
    records = None
    if size >= 0:
        at = reader.at
        reader.at = at + size
        records = reader.view[at : at + size]
    if reader.flexible:
        reader.no_tags("PartitionProduceData")
    return PartitionData(index, records)
