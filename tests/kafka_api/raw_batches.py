"""Record batches (v2) written byte by byte, for the cases a client's builder does not make:
any timestamp delta, null and negative lengths, headers with null values, a LogAppendTime
batch, and records regions that do not parse."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import crc32c
from aiokafka.codec import gzip_encode, lz4_encode, snappy_encode, zstd_encode

CODECS = {0: None, 1: gzip_encode, 2: snappy_encode, 3: lz4_encode, 4: zstd_encode}
LOG_APPEND_TIME = 0x08
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record count


class Record(NamedTuple):
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()


def varint(value: int) -> bytes:
    """Kafka's zigzag varint (up to 64 bits)."""
    zigzag = ((value << 1) ^ (value >> 63)) & (2**64 - 1)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _nullable(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def encode_record(record: Record, offset_delta: int) -> bytes:
    body = (
        b"\x00"
        + varint(record.timestamp_delta)
        + varint(offset_delta)
        + _nullable(record.key)
        + _nullable(record.value)
        + varint(len(record.headers))
        + b"".join(varint(len(k.encode())) + k.encode() + _nullable(v) for k, v in record.headers)
    )
    return varint(len(body)) + body


def batch_of(
    region: bytes,
    count: int,
    *,
    codec: int = 0,
    first_timestamp: int = 1_700_000_000_000,
    max_timestamp: int = 1_700_000_000_000,
    log_append_time: bool = False,
) -> bytes:
    """A batch around a records region as it is (compressed with `codec`), CRC included."""
    encode = CODECS[codec]
    records = region if encode is None else encode(region)
    attributes = codec | (LOG_APPEND_TIME if log_append_time else 0)
    after = (
        _AFTER_CRC.pack(attributes, count - 1, first_timestamp, max_timestamp, -1, -1, -1, count)
        + records
    )
    head = struct.pack(">qiib", 0, 4 + 1 + 4 + len(after), -1, 2)
    return head + struct.pack(">I", crc32c.crc32c(after)) + after


def raw_batch(
    records: Sequence[Record],
    *,
    codec: int = 0,
    first_timestamp: int = 1_700_000_000_000,
    log_append_time: bool = False,
) -> bytes:
    region = b"".join(encode_record(r, i) for i, r in enumerate(records))
    return batch_of(
        region,
        len(records),
        codec=codec,
        first_timestamp=first_timestamp,
        log_append_time=log_append_time,
    )
