"""Record batches (Kafka's message format v2) of a produce request, read with aiokafka's
record module: its C reader checks the CRC and undoes gzip, snappy, lz4 and zstd.

A batch becomes the envelope the decoders read (bridge.ingest.records), with the offsets
plateau assigns.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch

from bridge.ingest.records import envelope
from plateau_core.schema import HEADERS_TYPE, TIMESTAMP_TYPE

NO_PRODUCER = -1
_HEAD = struct.Struct(">qiib")  # base offset, batch length, leader epoch, magic
_LENGTH_END = 12  # batch_length counts the bytes after base offset and itself
_MIN_BATCH = 61  # the v2 batch header; a batch holds at least this many bytes


class CorruptBatchError(ValueError):
    """A batch that does not read (wrong size, bad CRC, undecodable compression)."""


class UnsupportedFormatError(ValueError):
    """A batch in message format v0 or v1, which produce v3 and later do not carry."""


@dataclass(frozen=True)
class ProducedBatch:
    """One record batch as a producer sent it."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    transactional: bool
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]]
    size: int

    @property
    def idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER

    @property
    def last_sequence(self) -> int:
        return (self.base_sequence + self.count - 1) % 2**31

    def records(self, base_offset: int, log_append_ms: int | None = None) -> pa.RecordBatch:
        """The envelope of these records at offsets from `base_offset`; `log_append_ms`
        replaces their own timestamps (LogAppendTime topics)."""
        count = self.count
        stamps = [log_append_ms] * count if log_append_ms is not None else self.timestamps
        if log_append_ms is None and stamps and min(stamps) < 0:
            now = int(time.time() * 1000)
            stamps = [now if s < 0 else s for s in stamps]
        keys = self.keys
        # Per batch, so the cheapest constructors: most producers send no keys.
        return envelope(
            pa.array(np.arange(base_offset, base_offset + count, dtype=np.int64)),
            pa.array(stamps, TIMESTAMP_TYPE),
            pa.nulls(count, pa.binary())
            if keys.count(None) == count
            else pa.array(keys, pa.binary()),
            _headers(self.headers),
            pa.array(self.values, pa.binary()),
        )


def split_batches(data: bytes) -> list[bytes]:
    """The record batches of a partition's `records` field, each as its own bytes."""
    batches = []
    view = memoryview(data)
    at = 0
    while at < len(data):
        if len(data) - at < _HEAD.size:
            raise CorruptBatchError(f"{len(data) - at} bytes left over after the last batch")
        _, length, _, magic = _HEAD.unpack_from(data, at)
        if magic != 2:
            raise UnsupportedFormatError(f"record batch magic {magic}: only v2 batches are read")
        end = at + _LENGTH_END + length
        if length < _MIN_BATCH - _LENGTH_END or end > len(data):
            raise CorruptBatchError(
                f"a batch claims {length} bytes; {len(data) - at - _LENGTH_END} are there"
            )
        batches.append(bytes(view[at:end]))
        at = end
    if not batches:
        raise CorruptBatchError("the partition's records hold no batch")
    return batches


def read_batch(data: bytes) -> ProducedBatch:
    """One v2 record batch, CRC checked and decompressed."""
    try:
        batch = DefaultRecordBatch(data)
        if not batch.validate_crc():
            raise CorruptBatchError("the batch's CRC does not match its contents")
        if batch.is_control_batch:
            raise CorruptBatchError("control batches are a broker's own; producers send none")
        timestamps: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        headers: list[list[tuple[str, bytes | None]]] = []
        for record in batch:
            timestamps.append(record.timestamp)
            keys.append(record.key)
            values.append(record.value)
            headers.append(record.headers)
    except CorruptBatchError:
        raise
    except Exception as exc:  # the reader's own errors: bad varints, codecs, sizes
        raise CorruptBatchError(f"the batch does not read: {type(exc).__name__}: {exc}") from exc
    count = batch.last_offset_delta + 1
    if len(values) != count:
        raise CorruptBatchError(f"the batch holds {len(values)} records; its header says {count}")
    return ProducedBatch(
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        count=count,
        transactional=batch.is_transactional,
        timestamps=timestamps,
        keys=keys,
        values=values,
        headers=headers,
        size=len(data),
    )


def _headers(headers: list[list[tuple[str, bytes | None]]]) -> pa.Array:
    if not any(headers):
        return pa.nulls(len(headers), HEADERS_TYPE)
    return pa.array(
        [[{"key": k, "value": v} for k, v in pairs] if pairs else None for pairs in headers],
        HEADERS_TYPE,
    )
