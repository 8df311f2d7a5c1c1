"""Produce requests read in place (bridge.kafka_api.produce_request) against kio's path, their
reference: random requests of every version the listener answers, written by kio's writer,
read to the same values with the records as views of the frame; damaged, cut or crafted
frames refused by both."""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer

from bridge.kafka_api.encoding import build
from bridge.kafka_api.protocol import (
    PRODUCE,
    SUPPORTED,
    ProtocolError,
    parse_request,
    parse_with_kio,
)
from fuzz.kafka_api_fuzz import check_frame, parsed, plain_produce
from tests.kafka_api.test_fuzz import FUZZ

VERSIONS = range(SUPPORTED[PRODUCE][1], SUPPORTED[PRODUCE][2] + 1)
_INT16 = st.integers(-(2**15), 2**15 - 1)
_INT32 = st.integers(-(2**31), 2**31 - 1)
_NAMES = st.text(max_size=12)


def frame_of(version: int, client_id: str | None, body: dict[str, Any]) -> bytes:
    """A Produce request as kio's writer writes it (without its size prefix)."""
    request_type: Any = load_request_schema(PRODUCE, version)
    header_type: Any = request_type.__header_schema__
    out = io.BytesIO()
    header = header_type(
        request_api_key=PRODUCE,
        request_api_version=version,
        correlation_id=7,
        client_id=client_id,
    )
    entity_writer(header_type)(out, header)
    entity_writer(request_type)(out, build(request_type, body))
    return out.getvalue()


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, str | None, dict[str, Any], bytes]:
    version = draw(st.sampled_from(VERSIONS))
    client_id = draw(st.none() | _NAMES)
    partition = st.fixed_dictionaries(
        {"index": _INT32, "records": st.none() | st.binary(max_size=40)}
    )
    topic = st.fixed_dictionaries(
        {"name": _NAMES, "partition_data": st.lists(partition, max_size=4)}
    )
    body = {
        "transactional_id": draw(st.none() | _NAMES),
        "acks": draw(_INT16),
        "timeout": draw(_INT32),
        "topic_data": draw(st.lists(topic, max_size=3)),
    }
    return version, client_id, body, frame_of(version, client_id, body)


@st.composite
def damaged_requests(draw: st.DrawFn) -> bytes:
    """A request with a few bytes changed after its prefix (api key, version: those are
    parse_request's own), then perhaps cut short."""
    frame = bytearray(draw(requests())[3])
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(8, len(frame) - 1))
        frame[at] = draw(
            st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]) | st.integers(0, 255)
        )
    cut = draw(st.integers(0, len(frame)))
    return bytes(frame[: cut if draw(st.booleans()) else len(frame)])


@FUZZ
@given(requests())
def test_every_version_reads_as_kio_reads_it(
    request: tuple[int, str | None, dict[str, Any], bytes],
) -> None:
    version, client_id, body, frame = request
    read = parse_request(frame)
    assert parsed(parse_request, frame) == parsed(parse_with_kio, frame)
    assert (read.api_version, read.correlation_id, read.client_id) == (version, 7, client_id)
    topics = tuple(
        (t["name"], tuple((p["index"], p["records"]) for p in t["partition_data"]))
        for t in body["topic_data"]
    )
    timeout = datetime.timedelta(milliseconds=body["timeout"])
    assert plain_produce(read.body) == (body["transactional_id"], body["acks"], timeout, topics)
    for topic in read.body.topic_data:
        for partition in topic.partition_data:
            # The frame's own bytes, not a copy.
            assert partition.records is None or partition.records.obj is frame


@FUZZ
@given(damaged_requests())
def test_damaged_requests_of_every_version_are_refused_as_kio_refuses_them(frame: bytes) -> None:
    check_frame(frame)


@pytest.mark.parametrize("version", [VERSIONS[0], 8, 9, VERSIONS[-1]])
def test_no_read_past_the_frame(version: int) -> None:
    """Cut at every byte, with more bytes after the cut in the same buffer: the reader sees
    only the frame (as kio's path does), so each cut reads as that many bytes alone."""
    partitions = [{"index": 0, "records": b"r" * 20}, {"index": 1, "records": None}]
    body = {"acks": -1, "timeout": 100, "topic_data": [{"name": "t", "partition_data": partitions}]}
    frame = frame_of(version, "c", body)
    buffer = bytearray(frame + frame)
    for cut in range(len(frame) + 1):
        alone = parsed(parse_request, frame[:cut])
        assert parsed(parse_request, memoryview(buffer)[:cut]) == alone
        assert alone == parsed(parse_with_kio, frame[:cut])
        assert (alone is ProtocolError) == (cut < len(frame))


def _header(version: int, client_id: bytes = b"c") -> bytes:
    head = struct.pack(">hhih", PRODUCE, version, 7, len(client_id)) + client_id
    return head + (b"\0" if version >= 9 else b"")  # v9 on: no tagged fields


def _legacy(*, txn: bytes = b"\xff\xff", topics: bytes | None = None) -> bytes:
    if topics is None:
        partition = struct.pack(">ii", 0, 5) + b"RRRRR"
        topics = struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", 1) + partition
    return _header(3) + txn + struct.pack(">hi", 1, 100) + topics


def _flexible(
    *, head: bytes | None = None, topics: bytes | None = None, tags: bytes = b"\0"
) -> bytes:
    if topics is None:
        partition = struct.pack(">i", 0) + b"\x06RRRRR\0"
        topics = b"\x02\x02t\x02" + partition + b"\0"
    return (head or _header(9)) + b"\0" + struct.pack(">hi", 1, 100) + topics + tags


# Frames kio's writer does not write, each read by kio's path (the bounds walk, then kio's
# reader) as shown, the topics read or ProtocolError: the in-place reader must agree.
CRAFTED = {
    # Produce's arrays have no null versions: kio reads one as None, both paths refuse it.
    "a null topic array": (_legacy(topics=struct.pack(">i", -1)), ProtocolError),
    "a null partition array": (
        _legacy(topics=struct.pack(">ih", 1, 1) + b"t" + b"\xff" * 4),
        ProtocolError,
    ),
    "null records": (
        _legacy(topics=struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, -1)),
        (("t", ((0, None),)),),
    ),
    "trailing bytes": (_legacy() + b"xyz", (("t", ((0, b"RRRRR"),)),)),
    "a transactional id of length -2": (_legacy(txn=struct.pack(">h", -2)), ProtocolError),
    "a topic array of -7": (_legacy(topics=struct.pack(">i", -7)), ProtocolError),
    "a null topic name": (_legacy(topics=struct.pack(">ihi", 1, -1, 0)), ProtocolError),
    "records of length -9": (
        _legacy(topics=struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, -9)),
        ProtocolError,
    ),
    "a topic name not UTF-8": (
        _legacy(topics=struct.pack(">ih", 1, 1) + b"\xff\0\0\0\0"),
        ProtocolError,
    ),
    "a client id not UTF-8": (_header(3, b"\xff") + _legacy()[11:], ProtocolError),
    "flexible: a null topic array": (_flexible(topics=b"\0"), ProtocolError),
    "flexible: a null partition array": (_flexible(topics=b"\x02\x02t\0\0"), ProtocolError),
    "flexible: a null topic name": (_flexible(topics=b"\x02\0\x01\0"), ProtocolError),
    "flexible: a count as a two-byte varint": (
        _flexible(topics=b"\x82\x00\x02t\x02" + struct.pack(">i", 0) + b"\x06RRRRR\0\0"),
        (("t", ((0, b"RRRRR"),)),),
    ),
    "flexible: a six-byte varint": (
        _flexible(topics=b"\x82\x80\x80\x80\x80\x00\x02t\x02" + struct.pack(">i", 0) + b"\x01\0\0"),
        ProtocolError,
    ),
    "flexible: a tagged field of the request": (_flexible(tags=b"\x01\x00\x00"), ProtocolError),
    "flexible: a tagged field of the header": (
        _flexible(head=_header(9)[:-1] + b"\x01\x00\x00"),
        ProtocolError,
    ),
    "flexible: no tagged fields after the header": (_header(9)[:-1], ProtocolError),
}


@pytest.mark.parametrize("name", CRAFTED)
def test_crafted_frames_read_as_kio_reads_them(name: str) -> None:
    frame, expected = CRAFTED[name]
    read = parsed(parse_request, frame)
    assert read == parsed(parse_with_kio, frame)
    if expected is ProtocolError:
        assert read is ProtocolError
        return
    assert not isinstance(read, type)
    assert read[-1] == expected
