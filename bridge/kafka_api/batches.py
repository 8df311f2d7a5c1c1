"""Record batches (Kafka's message format v2) of a produce request: CRC checked with crc32c,
their header read here and their records by plateau's own bounds-checked compiled reader
(bridge.kafka_api.record_rows), which undoes gzip, snappy, lz4 and zstd with a bound on
what the records expand to (bridge.kafka_api.codecs).

A batch becomes the envelope the decoders read (bridge.ingest.records), with the offsets
plateau assigns: its rows are built by the same compiled code.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c
import pyarrow as pa

from bridge.config.kafka_api import MAX_UNCOMPRESSED_BATCH_BYTES
from bridge.ingest.records import envelope
from bridge.kafka_api.codecs import ExpansionError
from bridge.kafka_api.record_rows import RECORDS_AT, Placement, check_records, record_columns

NO_PRODUCER = -1
NO_TIMESTAMP = -1  # a record the producer left without a time
_HEAD = struct.Struct(">qiib")  # base offset, batch length, leader epoch, magic
_LENGTH_END = 12  # batch_length counts the bytes after base offset and itself
_CRC = struct.Struct(">I")
_CRC_AT, _CRC_FROM = 17, 21  # where the CRC field is, where the bytes it covers start
# attributes, last offset delta, first and max timestamp, producer id and epoch, base
# sequence, record count: the header after the CRC
_AFTER_CRC = struct.Struct(">hiqqqhii")
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


class CorruptBatchError(ValueError):
    """A batch that does not read (wrong size, bad CRC, undecodable compression)."""


class UnsupportedFormatError(ValueError):
    """A batch in message format v0 or v1, which produce v3 and later do not carry."""


class InvalidBatchError(ValueError):
    """A batch that reads but breaks the format's rules (no records, a count that does not
    match them, an idempotent batch without a sequence): Kafka's INVALID_RECORD."""


class OversizedBatchError(ValueError):
    """A compressed batch whose records expand past kafka_api.max_uncompressed_batch_bytes:
    Kafka's MESSAGE_TOO_LARGE."""


class Records(NamedTuple):
    """The keys and values of a batch's records, in order."""

    keys: list[bytes | None]
    values: list[bytes | None]


@dataclass(slots=True)
class ProducedBatch:
    """One record batch as a producer sent it, checked: its records are read again from
    `data` when they are needed (`records`), not kept from the check. A Python object per
    record, held from arrival to the seal, cost the listener more than the reading itself
    (fresh memory for every value, and more for the garbage collector to walk), and a raw
    topic needs its records only when the seal builds its rows (`envelope_of`).

    Nothing changes one once read, but it is not a frozen dataclass: one is made per
    produced batch, and a frozen one's nine fields set through object.__setattr__ took
    1.4 us of the listener's time per batch, this 0.2 (docs/benchmarks.md, the Kafka API)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    transactional: bool
    size: int
    newest: int = NO_TIMESTAMP  # the records' latest timestamp (ms; -1: none carries one)
    data: bytes | memoryview = b""  # the batch as the producer sent it (the journal keeps it)
    # Its records decompressed (of an uncompressed batch, `size` less the header): what the
    # seal reads and builds from, so what its memory is counted by.
    records_bytes: int = 0

    @property
    def idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER

    @property
    def last_sequence(self) -> int:
        return (self.base_sequence + self.count - 1) % 2**31

    def records(self) -> Records:
        """The batch's keys and values as Python objects, read again from its bytes by the
        compiled reader that checked it: what a registry's schema prefetch looks at. Rows
        are built by `envelope_of`."""
        try:
            columns = record_columns([Placement(self.data, 0, -1, NO_TIMESTAMP)])
        except ValueError as exc:
            raise CorruptBatchError(f"the records do not read: {exc}") from exc
        return Records(columns.keys.to_pylist(), columns.values.to_pylist())


class Placed(NamedTuple):
    """A batch at the offsets plateau gave it, with the times its timestamps take from (a
    tuple: one is made per produced batch, in half the time of a frozen dataclass)."""

    batch: ProducedBatch
    base_offset: int
    log_append_ms: int  # LogAppendTime topics: every record's timestamp; -1: their own
    now_ms: int  # the time of records that carry none


def envelope_of(placed: Sequence[Placed]) -> pa.RecordBatch:
    """The envelope of several batches' records, in order, built with one array per column
    by compiled code (bridge.kafka_api.record_rows). Timestamps as stored: the placing's
    `log_append_ms` for every record (LogAppendTime, when not -1), else their own, with
    `now_ms` for any a producer left unset (-1; other times before 1970 are kept, as Kafka
    keeps them)."""
    count = sum(p.batch.count for p in placed)
    try:
        columns = record_columns(
            [Placement(p.batch.data, p.base_offset, p.log_append_ms, p.now_ms) for p in placed]
        )
    except ValueError as exc:
        raise CorruptBatchError(f"the records do not build: {exc}") from exc
    if len(columns.offsets) != count:
        raise CorruptBatchError(f"the batches hold {len(columns.offsets)} records, not {count}")
    return envelope(*columns)


def split_batches(data: bytes | memoryview) -> list[bytes | memoryview]:
    """The record batches of a partition's `records` field: views into it, not copies (most
    requests carry one batch per partition, and it is the whole field)."""
    batches: list[bytes | memoryview] = []
    view = memoryview(data)
    at = 0
    while at < len(data):
        if len(data) - at < _HEAD.size:
            raise CorruptBatchError(f"{len(data) - at} bytes left over after the last batch")
        _, length, _, magic = _HEAD.unpack_from(data, at)
        if magic != 2:
            raise UnsupportedFormatError(f"record batch magic {magic}: only v2 batches are read")
        end = at + _LENGTH_END + length
        if length < RECORDS_AT - _LENGTH_END or end > len(data):
            raise CorruptBatchError(
                f"a batch claims {length} bytes; {len(data) - at - _LENGTH_END} are there"
            )
        batches.append(data if at == 0 and end == len(data) else view[at:end])
        at = end
    if not batches:
        raise CorruptBatchError("the partition's records hold no batch")
    return batches


def read_batch(
    data: bytes | memoryview, max_uncompressed: int | None = MAX_UNCOMPRESSED_BATCH_BYTES
) -> ProducedBatch:
    """One v2 record batch, CRC checked, decompressed and every record read. Its records
    may expand to at most `max_uncompressed` bytes (None: no limit, for a batch that was
    checked on arrival under the limit then in force); OversizedBatchError past that."""
    if len(data) < RECORDS_AT:
        raise CorruptBatchError(f"a batch of {len(data)} bytes is shorter than its header")
    # The CRC-32C field covers the batch from its attributes on. Checked here with the
    # crc32c package's hardware instructions: 1 us for 16 KiB where aiokafka's own
    # validate_crc takes 8 (bench/record_batch_probe.py).
    (expected,) = _CRC.unpack_from(data, _CRC_AT)
    if crc32c.crc32c(memoryview(data)[_CRC_FROM:]) != expected:
        raise CorruptBatchError("the batch's CRC does not match its contents")
    (
        attributes,
        last_offset_delta,
        _first_timestamp,
        _max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        _record_count,
    ) = _AFTER_CRC.unpack_from(data, _CRC_FROM)
    if attributes & _CONTROL:
        raise CorruptBatchError("control batches are a broker's own; producers send none")
    # Every record is read (and let go) so that a batch that does not read is refused now,
    # not found at its seal after it was acknowledged. Their newest timestamp is taken from
    # the records, not from the header's max_timestamp, which a producer sets and need not
    # get right. The compiled reader is bounds checked: the CRC is no authentication, and
    # aiokafka's reader reads past the end of a crafted batch.
    try:
        read, newest, records_bytes = check_records(data, max_uncompressed)
    except ExpansionError as exc:
        raise OversizedBatchError(str(exc)) from exc
    except ValueError as exc:
        raise CorruptBatchError(f"the batch does not read: {exc}") from exc
    count = last_offset_delta + 1
    if count <= 0:
        raise InvalidBatchError(f"the batch's last offset delta {count - 1} leaves no records")
    if read != count:
        raise InvalidBatchError(f"the batch holds {read} records; its header says {count}")
    if producer_id != NO_PRODUCER and base_sequence < 0:
        raise InvalidBatchError(f"sequence {base_sequence} in a batch of producer {producer_id}")
    # Positional: keywords cost a third of the construction.
    return ProducedBatch(
        producer_id,
        producer_epoch,
        base_sequence,
        count,
        bool(attributes & _TRANSACTIONAL),
        len(data),
        newest,
        data,
        records_bytes,
    )
