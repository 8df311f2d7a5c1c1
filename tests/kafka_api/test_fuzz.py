"""The frame and record-batch parsers on arbitrary and on damaged input: they answer with
their own errors (which the listener turns into a closed connection or CORRUPT_MESSAGE),
never with anything else. fuzz/kafka_api_fuzz.py runs the same rule under atheris."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.kafka_api.batches import read_batch, split_batches
from fuzz.kafka_api_fuzz import check_batches, check_frame
from tests.kafka_api.support import RawClient, produce_body, record_batch

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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


@FUZZ
@given(st.lists(st.binary(max_size=50), min_size=1, max_size=20), st.integers(0, 4))
def test_batches_read_back_what_was_written(values: list[bytes], codec: int) -> None:
    data = record_batch(values, codec=codec)
    [part] = split_batches(data)
    assert read_batch(part).values == values


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
