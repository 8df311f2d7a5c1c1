"""The rows of produced batches built by compiled code (bridge/kafka_api/_record_rows.c):
the same arrays (values, nulls, types) aiokafka's reader gives, for random batches of every
codec, and a ValueError naming what is wrong, never a crash, for records that do not parse."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.kafka_api import _record_rows
from bridge.kafka_api.batches import CorruptBatchError, Placed, envelope_of, read_batch
from bridge.kafka_api.record_rows import Placement, record_columns
from fuzz.kafka_api_fuzz import aiokafka_envelope, check_record_rows
from tests.kafka_api.raw_batches import Record, batch_of, encode_record, raw_batch, varint

FIRST = 1_700_000_000_000
NOW = 1_800_000_000_000

payloads = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.integers(1, 70_000).map(lambda n: bytes(range(256)) * (n // 256) + b"x" * (n % 256)),
)
records = st.builds(
    Record,
    timestamp_delta=st.one_of(
        st.integers(-(2**40), 2**40), st.just(-1 - FIRST), st.just(-5 - FIRST), st.just(0)
    ),
    key=payloads,
    value=payloads,
    headers=st.lists(
        st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=4
    ),
)
batches = st.builds(
    lambda records, codec, log_append_time, placed_at: (
        raw_batch(records, codec=codec, first_timestamp=FIRST, log_append_time=log_append_time),
        placed_at,
    ),
    st.lists(records, min_size=1, max_size=12),
    st.integers(0, 4),
    st.booleans(),
    st.sampled_from([-1, NOW - 7]),  # the records' own times, or a LogAppendTime topic's
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batches, min_size=1, max_size=5))
def test_built_rows_are_what_aiokafka_reads(produced: list[tuple[bytes, int]]) -> None:
    placed = []
    base = 0
    for data, log_append_ms in produced:
        batch = read_batch(data)
        placed.append(Placed(batch, base, log_append_ms, NOW))
        base += batch.count + 3  # offsets need not be contiguous between batches
    built = envelope_of(placed)
    oracle = aiokafka_envelope(
        [Placement(p.batch.data, p.base_offset, p.log_append_ms, p.now_ms) for p in placed],
        sum(p.batch.count for p in placed),
    )
    assert built.schema.equals(oracle.schema)
    assert built.equals(oracle)
    for name in built.schema.names:
        assert built.column(name).null_count == oracle.column(name).null_count, name
        assert built.column(name).type == oracle.column(name).type, name
    built.validate(full=True)


def test_a_seal_of_many_batches_builds_every_record_once() -> None:
    data = raw_batch([Record(i, None, b"v%d" % i) for i in range(15)], codec=3)
    placed = [Placed(read_batch(data), 15 * i, -1, NOW) for i in range(200)]
    built = envelope_of(placed)
    assert built.column("offset").to_pylist() == list(range(3000))
    assert built.column("value").to_pylist() == [b"v%d" % (i % 15) for i in range(3000)]
    assert built.column("key").null_count == 3000
    assert built.column("headers").null_count == 3000


def region(*records: bytes) -> bytes:
    return b"".join(varint(len(r)) + r for r in records)


GOOD = encode_record(Record(0, b"k", b"v", [("h", b"x")]), 0)
# Record bodies after their length: attributes, timestamp delta, offset delta, then fields.
MALFORMED = {
    "the record length runs past the end": b"\x80",
    "key claims 50 bytes": region(b"\x00\x00\x00" + varint(50) + b"ab"),
    "value claims": region(b"\x00\x00\x00\x01" + varint(9) + b"x"),
    "more than 10 bytes": region(b"\x00" + b"\xff" * 11 + b"\x00"),
    "-1 headers": region(b"\x00\x00\x00\x01\x01" + varint(-1)),
    "1000000 headers": region(b"\x00\x00\x00\x01\x01" + varint(1_000_000) + b"\x00\x01"),
    "key of length -1": region(b"\x00\x00\x00\x01\x01\x02" + varint(-1) + b"\x01"),
    "not UTF-8": region(b"\x00\x00\x00\x01\x01\x02" + varint(3) + b"\xed\xa0\x80\x01"),
    "header value claims": region(b"\x00\x00\x00\x01\x01\x02\x02h" + varint(30) + b"x"),
    "the record claims 9 bytes and holds 12": varint(9) + GOOD[1:],
    "3 bytes are left after": GOOD + b"\x01\x02\x03",
}


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_records_that_do_not_parse_raise_a_value_error_naming_what(what: str) -> None:
    data = batch_of(MALFORMED[what], 1)
    with pytest.raises(ValueError, match=what):
        record_columns([Placement(data, 0, -1, NOW)])


def test_a_damaged_batch_at_the_seal_is_a_corrupt_batch_error() -> None:
    good = read_batch(raw_batch([Record(0, None, b"v")]))
    bad = dataclasses.replace(good, data=batch_of(MALFORMED["value claims"], 1))
    with pytest.raises(CorruptBatchError, match=r"batch 1, record 0 .*value claims"):
        envelope_of([Placed(good, 0, -1, NOW), Placed(bad, 1, -1, NOW)])


def test_a_header_count_that_disagrees_with_the_batch_is_refused() -> None:
    good = read_batch(raw_batch([Record(0, None, b"v")]))
    two = dataclasses.replace(good, count=2)
    with pytest.raises(CorruptBatchError, match="hold 1 records, not 2"):
        envelope_of([Placed(two, 0, -1, NOW)])


@pytest.mark.parametrize(
    ("batches", "error", "what"),
    [
        ([(b"short", None, 0, -1, 0)], ValueError, "shorter than a batch header"),
        ([(b"\x00" * 57 + b"\xff\xff\xff\xff", None, 0, -1, 0)], ValueError, "record count"),
        ([(b"\x00" * 61, None, 0)], TypeError, "expected \\(data, region or None"),
        ([b"not a tuple"], TypeError, "expected \\(data, region or None"),
        ([(object(), None, 0, -1, 0)], TypeError, "bytes-like"),
    ],
)
def test_what_is_not_a_batch_is_refused(
    batches: list[object], error: type[Exception], what: str
) -> None:
    with pytest.raises(error, match=what):
        _record_rows.build(batches, pa.allocate_buffer)  # type: ignore[arg-type]


def test_a_decompressed_region_is_read_in_place_of_the_batch_bytes() -> None:
    data = raw_batch([Record(0, None, b"abc")], codec=4)
    plain = encode_record(Record(0, b"k", None), 0)
    built = _record_rows.build([(data, plain, 0, -1, NOW)], pa.allocate_buffer)
    assert (built["rows"], built["key_nulls"], built["value_nulls"]) == (1, 0, 1)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_record_regions(data: bytes) -> None:
    check_record_rows(data)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_damaged_record_regions(data: st.DataObject) -> None:
    whole = bytearray(
        b"".join(
            encode_record(Record(i - 2, b"k" * i or None, b"v" * 3 * i, [("h", None)] * i), i)
            for i in range(4)
        )
    )
    for _ in range(data.draw(st.integers(1, 4))):
        whole[data.draw(st.integers(0, len(whole) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(whole)))
    check_record_rows(bytes([data.draw(st.sampled_from([4, 0x14, 3, 5]))]) + bytes(whole[:cut]))
