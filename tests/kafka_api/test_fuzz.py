"""The frame, record-batch and journal parsers on arbitrary and on damaged input: they answer
with their own errors (which the listener turns into a closed connection or CORRUPT_MESSAGE,
and the journal into a refused start), never with anything else. fuzz/kafka_api_fuzz.py runs
the same rule under atheris."""

from __future__ import annotations

import os

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.ingest.records import Kept
from bridge.kafka_api.batches import Placed, read_batch, split_batches
from bridge.kafka_api.lazy_records import KafkaRecords
from fuzz.kafka_api_fuzz import (
    check_batch_with_crc,
    check_batches,
    check_frame,
    check_journal,
    check_journal_frame,
)
from plateau_core import Append
from plateau_core.journal_codec import MAGIC, SchemaIds, encode_group, encode_schema, read_file
from plateau_core.lazy import materialize
from plateau_core.schema import normalized
from plateau_core.slog import Prepared
from tests.kafka_api.raw_batches import Record, raw_batch
from tests.kafka_api.support import RawClient, produce_body, record_batch
from tests.support import batch

FUZZ = settings(
    max_examples=int(os.environ.get("PLATEAU_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def produce_frame(codec: int) -> bytes:
    client = RawClient.__new__(RawClient)  # only its frame builder: no connection
    client.correlation = 0
    return client.request_frame(
        0, 9, produce_body("t", 0, record_batch([b"a", b"bc"], codec=codec))
    )


@st.composite
def damaged(draw: st.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[: cut if draw(st.booleans()) else len(data)])


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_frames(frame: bytes) -> None:
    check_frame(frame)


@FUZZ
@given(st.integers(0, 4).flatmap(lambda codec: damaged(produce_frame(codec))))
def test_damaged_produce_frames(frame: bytes) -> None:
    check_frame(frame)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_record_batches(data: bytes) -> None:
    check_batches(data)


@FUZZ
@given(
    st.integers(0, 4).flatmap(lambda codec: damaged(record_batch([b"x" * 40, b"y"], codec=codec)))
)
def test_damaged_record_batches(data: bytes) -> None:
    check_batches(data)


def headed_batch(codec: int) -> bytes:
    """Records with keys, null values and headers: every field the arrival check reads."""
    return raw_batch(
        [
            Record(0, b"k", b"v" * 20, [("h", b"x"), ("g", None)]),
            Record(-3, None, None),
            Record(200, b"", b"w", [("\u00e9", b"")]),
        ],
        codec=codec,
    )


@FUZZ
@given(st.integers(0, 4).flatmap(lambda codec: damaged(headed_batch(codec))))
def test_damaged_record_batches_with_a_matching_crc(data: bytes) -> None:
    """The arrival check past the CRC (the CRC is no authentication): what aiokafka's reader
    refuses is refused with the same error, what it reads is accepted alike."""
    check_batch_with_crc(data)


@FUZZ
@given(st.binary(min_size=61, max_size=300))
def test_arbitrary_record_batches_with_a_matching_crc(data: bytes) -> None:
    check_batch_with_crc(data)


def test_a_batch_refused_for_its_claimed_expansion_is_no_finding() -> None:
    """Found by the fuzz target: four bytes of snappy records claiming 69,206,016 bytes,
    over the cap on decompressed records (kafka_api.max_uncompressed_batch_bytes), which
    aiokafka's reader, the oracle, does not have. Refused for the cap, the batch is read
    again without it and must agree with the oracle."""
    claim = 69_206_016
    varint = bytearray()
    while claim >= 0x80:
        varint.append(claim & 0x7F | 0x80)
        claim >>= 7
    varint.append(claim)
    header = bytearray(61)
    header[21:23] = (2).to_bytes(2, "big")  # attributes: snappy
    data = bytes(header) + bytes(varint)
    check_batch_with_crc(data)


@FUZZ
@given(st.lists(st.binary(max_size=50), min_size=1, max_size=20), st.integers(0, 4))
def test_batches_read_back_what_was_written(values: list[bytes], codec: int) -> None:
    data = record_batch(values, codec=codec)
    [part] = split_batches(data)
    assert read_batch(part).records().values == values


def test_a_huge_array_count_is_refused_before_anything_is_allocated() -> None:
    """Found by fuzz/kafka_api_fuzz.py: a Metadata request claiming billions of topics made
    kio's reader reserve hundreds of gigabytes, and the process aborted."""
    import struct  # noqa: PLC0415

    import pytest  # noqa: PLC0415

    from bridge.kafka_api.protocol import ProtocolError, parse_request  # noqa: PLC0415

    header = struct.pack(">hhih", 3, 11, 1, -1) + b"\0"  # Metadata v11, no client id, no tags
    body = b"\xff\xff\xff\xff\x0f" + b"\0" * 8  # compact array of 2**32 - 2 topics
    with pytest.raises(ProtocolError, match="elements claimed"):
        parse_request(header + body)


def journal_file() -> bytes:
    """The bytes after the header of a journal file holding a decoded batch and a produced
    batch kept as it came."""
    produced = read_batch(record_batch([b"x" * 30, b"y"], producer_id=3, epoch=0, sequence=0))
    lazy = KafkaRecords(Placed(produced, 2, -1, 1_700_000_000_000), Kept())
    rows, fingerprint = normalized(batch([0, 1]))
    appends = [Append("t", 0, (rows,)), Append("t", 0, (lazy,))]
    prepared = [[Prepared(rows, fingerprint, rows.nbytes)], [Prepared(lazy, lazy.fingerprint, 1)]]
    encoded = encode_group(0, appends, prepared, ids := SchemaIds())
    schema = encode_schema(0, ids.schemas[0])
    return schema + b"".join(bytes(c) for c in encoded.chunks)


def test_a_journal_file_reads_back() -> None:
    read = read_file(pa.py_buffer(MAGIC + journal_file()), "t.journal")
    assert read.torn_at is None
    [group] = read.groups
    rows = [b.to_pylist() for a in group.appends for b in materialize(a.batches)]
    assert [r["offset"] for batch_rows in rows for r in batch_rows] == [0, 1, 2, 3]
    assert rows[1][0]["value"] == b"x" * 30


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_journal_files(data: bytes) -> None:
    check_journal(data)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_journal_frames_with_matching_checksums(body: bytes) -> None:
    check_journal_frame(body)


@FUZZ
@given(damaged(journal_file()))
def test_damaged_journal_files(data: bytes) -> None:
    check_journal(data)


@FUZZ
@given(damaged(journal_file()[4 + 4 :]))
def test_damaged_journal_frame_bodies_with_matching_checksums(body: bytes) -> None:
    """Past the checksum: the decoding of groups and of produced batches themselves."""
    check_journal_frame(body)
