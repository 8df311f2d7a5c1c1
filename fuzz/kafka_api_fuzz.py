"""Fuzz target for the Kafka API's parsers: request frames (kio's entities; Produce read in
place), record batches (the compiled reader's check on arrival, its row builder at the seal)
and the journal's files, read back after a crash. Each may only answer
with its own error types (the listener turns the first two into a closed connection or
CORRUPT_MESSAGE; the journal's stop the start with a message); any other exception is a bug.
kio's path is the oracle of Produce frames: the in-place reader refuses what it refuses and
reads the same values from the rest. aiokafka's reader is the oracle of the batches: the
arrival check refuses what it refuses, with the same error, and accepts what it reads with
the same count and newest timestamp.

The test suite runs the same checks with hypothesis (tests/kafka_api/test_fuzz.py). For a
longer, coverage-guided run:

    .venv/bin/pip install atheris
    .venv/bin/python fuzz/kafka_api_fuzz.py -max_total_time=600
"""

from __future__ import annotations

import contextlib
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Any

import crc32c
import pyarrow as pa
from aiokafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode
from aiokafka.record.default_records import DefaultRecordBatch

import bridge.kafka_api.lazy_records  # noqa: F401 - registers the loader of produced batches
from bridge.config.kafka_api import MAX_UNCOMPRESSED_BATCH_BYTES
from bridge.ingest.records import ENVELOPE
from bridge.kafka_api.batches import (
    NO_PRODUCER,
    NO_TIMESTAMP,
    CorruptBatchError,
    InvalidBatchError,
    OversizedBatchError,
    Placed,
    ProducedBatch,
    UnsupportedFormatError,
    envelope_of,
    read_batch,
    split_batches,
)
from bridge.kafka_api.protocol import (
    PRODUCE,
    ProtocolError,
    Request,
    parse_request,
    parse_with_kio,
)
from bridge.kafka_api.record_rows import Placement, record_columns
from plateau_core.journal_codec import FRAME, MAGIC, JournalCorruptError, last_group, read_file
from plateau_core.lazy import UnknownLazyKindError
from plateau_core.schema import HEADERS_TYPE, TIMESTAMP_TYPE

_LOG_APPEND_TIME = 0x08
_DECODE: dict[int, Callable[[bytes], bytes]] = {
    1: gzip_decode,
    2: snappy_decode,
    3: lz4_decode,
    4: zstd_decode,
}
# base offset .. record count: a batch header before a records region (no CRC: neither
# reader checks it)
_BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")


def check_frame(frame: bytes) -> None:
    read = parsed(parse_request, frame)
    if frame[:2] == b"\0\0":  # Produce: read in place, and by kio's path to the same end
        assert read == parsed(parse_with_kio, frame), f"in place {read}, kio {frame!r}"


def parsed(
    parse: Callable[[bytes | memoryview], Request], frame: bytes | memoryview
) -> tuple[Any, ...] | type:
    """The request's values as plain tuples (a Produce request's records as bytes), or the
    type of the ProtocolError that refused it."""
    try:
        request = parse(frame)
    except ProtocolError as exc:
        return type(exc)
    head = (request.api_key, request.api_version, request.correlation_id, request.client_id)
    if request.api_key != PRODUCE:
        return (*head, request.body)
    return (*head, *plain_produce(request.body))


def plain_produce(body: Any) -> tuple[Any, ...]:
    """A Produce request's values, of kio's entity or the in-place reader's."""
    topics = None
    if body.topic_data is not None:
        topics = tuple((t.name, _plain_partitions(t.partition_data)) for t in body.topic_data)
    return (body.transactional_id, body.acks, body.timeout, topics)


def _plain_partitions(partitions: Any) -> tuple[tuple[int, bytes | None], ...] | None:
    if partitions is None:
        return None
    return tuple((p.index, None if p.records is None else bytes(p.records)) for p in partitions)


def check_batches(data: bytes) -> None:
    """A batch is checked on arrival as aiokafka's reader checked it, and read again at its
    seal: that must never fail, and builds the rows aiokafka's reader reads."""
    try:
        parts = split_batches(data)
    except (CorruptBatchError, UnsupportedFormatError):
        return
    batches: list[ProducedBatch] = []
    for part in parts:
        checked = outcome(read_batch, part)
        oracle = outcome(aiokafka_read_batch, part)
        if isinstance(checked, OversizedBatchError):
            # The cap on decompressed records is plateau's own (aiokafka's reader has none):
            # without it the batch reads as aiokafka reads it, and past the cap when it reads.
            checked = outcome(uncapped_read_batch, part)
            if isinstance(checked, ProducedBatch):
                assert checked.records_bytes > MAX_UNCOMPRESSED_BATCH_BYTES, checked
        if isinstance(checked, ProducedBatch) and isinstance(oracle, ProducedBatch):
            assert checked == oracle, f"checked {checked}, aiokafka read {oracle}"
            batches.append(checked)
        else:
            assert type(checked) is type(oracle), f"checked {checked!r}, aiokafka {oracle!r}"
    if len(batches) < len(parts):
        return
    # Every other batch as a LogAppendTime topic's (all its records at that time)
    placed = [Placed(batch, 10 * i, i % 2 * 11 - 1, 7) for i, batch in enumerate(batches)]
    built = envelope_of(placed)
    places = [Placement(p.batch.data, p.base_offset, p.log_append_ms, p.now_ms) for p in placed]
    assert built.equals(aiokafka_envelope(places, sum(batch.count for batch in batches)))


def check_batch_with_crc(data: bytes) -> None:
    """Arbitrary bytes as one v2 batch whose size, magic and CRC are right: what reaches the
    record reader past the checks a fuzzer would seldom get through."""
    if len(data) < 61:
        return
    batch = bytearray(data)
    struct.pack_into(">i", batch, 8, len(batch) - 12)  # the batch length
    batch[16] = 2  # the magic, after the partition leader epoch
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    check_batches(bytes(batch))


def check_record_rows(data: bytes) -> None:
    """Arbitrary bytes as a batch's records (its header's count and timestamp type from the
    first byte): the compiled builder raises ValueError exactly when aiokafka's reader does
    not read them, and builds what it reads otherwise."""
    if not data:
        return
    count, log_append = data[0] % 16, bool(data[0] & 0x10)
    attributes = _LOG_APPEND_TIME if log_append else 0
    region = data[1:]
    head = _BATCH_HEAD.pack(
        0, 49 + len(region), -1, 2, 0, attributes, count - 1, 5, 9, -1, -1, -1, count
    )
    batch = head + region
    try:
        built: pa.RecordBatch | None = pa.RecordBatch.from_arrays(
            list(record_columns([Placement(batch, 3, -1, 7)])), schema=ENVELOPE
        )
    except ValueError:
        built = None
    try:
        read: pa.RecordBatch | None = aiokafka_envelope([Placement(batch, 3, -1, 7)], count)
    except Exception:  # the reader's own errors: what a produce request is refused with
        read = None
    if read is None or built is None:
        assert read is built, f"aiokafka read {read}, the build gave {built}"
    else:
        assert built.equals(read)


def outcome(
    read: Callable[[bytes | memoryview], ProducedBatch], data: bytes | memoryview
) -> ProducedBatch | CorruptBatchError | InvalidBatchError | OversizedBatchError:
    try:
        return read(data)
    except (CorruptBatchError, InvalidBatchError, OversizedBatchError) as exc:
        return exc


def uncapped_read_batch(data: bytes | memoryview) -> ProducedBatch:
    return read_batch(data, max_uncompressed=None)


def aiokafka_read_batch(data: bytes | memoryview) -> ProducedBatch:
    """The arrival check as it was with aiokafka's reader: its CRC, every record read, the
    count and sequence rules, each refused with the same error type."""
    if len(data) < 61:
        raise CorruptBatchError("shorter than a header")
    batch = DefaultRecordBatch(bytes(data))
    if crc32c.crc32c(memoryview(data)[21:]) != batch.crc:
        raise CorruptBatchError("crc")
    if batch.is_control_batch:
        raise CorruptBatchError("control batch")
    try:
        stamps = [record.timestamp for record in batch]
    except Exception as exc:  # the reader's own errors: bad varints, codecs, sizes
        raise CorruptBatchError(f"{type(exc).__name__}: {exc}") from exc
    count = batch.last_offset_delta + 1
    if count <= 0 or len(stamps) != count:
        raise InvalidBatchError("count")
    if batch.producer_id != NO_PRODUCER and batch.base_sequence < 0:
        raise InvalidBatchError("sequence")
    codec = data[22] & 0x07
    records = len(data) - 61 if codec == 0 else len(_DECODE[codec](bytes(data[61:])))
    return ProducedBatch(
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        count=count,
        transactional=batch.is_transactional,
        size=len(data),
        newest=max(stamps, default=NO_TIMESTAMP),
        data=data,
        records_bytes=records,
    )


def aiokafka_envelope(batches: Sequence[Placement], count: int) -> pa.RecordBatch:
    """The envelope of batches as aiokafka's reader reads them, built from Python objects as
    plateau built it before its rows were built by compiled code: the oracle the compiled
    build is checked against. `count`: the records the batches hold in all."""
    offsets: list[int] = []
    stamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[dict[str, object]] | None] = []
    for place in batches:
        for i, record in enumerate(DefaultRecordBatch(place.data)):
            offsets.append(place.base_offset + i)
            if place.log_append_ms >= 0:
                stamps.append(place.log_append_ms)
            else:
                stamps.append(place.now_ms if record.timestamp == -1 else record.timestamp)
            keys.append(record.key)
            values.append(record.value)
            pairs = [{"key": k, "value": v} for k, v in record.headers]
            headers.append(pairs or None)
    if len(offsets) != count:
        raise ValueError("the batches hold another number of records than they say")
    return pa.RecordBatch.from_arrays(
        [
            pa.array(offsets, pa.int64()),
            pa.array(stamps, TIMESTAMP_TYPE),
            pa.array(keys, pa.binary()),
            pa.array(headers, HEADERS_TYPE),
            pa.array(values, pa.binary()),
        ],
        schema=ENVELOPE,
    )


def check_journal(data: bytes) -> None:
    """A journal file's bytes after its header."""
    buffer = pa.py_buffer(MAGIC + data)
    last_group(buffer)  # finding where a journal ends never fails
    with contextlib.suppress(JournalCorruptError, UnknownLazyKindError):
        read_file(buffer, "fuzz.journal")


def check_journal_frame(body: bytes) -> None:
    """Arbitrary bytes in a frame whose checksum matches: what the decoding must survive."""
    check_journal(FRAME.pack(len(body), crc32c.crc32c(body)) + body)


PARSERS = (
    check_frame,
    check_batches,
    check_journal,
    check_journal_frame,
    check_record_rows,
    check_batch_with_crc,
)


def one_input(data: bytes) -> None:
    if not data:
        return
    # The first byte picks the parser, so one corpus serves all.
    PARSERS[data[0] % len(PARSERS)](data[1:])


def main() -> None:
    import atheris  # noqa: PLC0415 - only for fuzzing runs, not a dependency

    atheris.instrument_all()  # coverage of the parsers, already imported above
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
