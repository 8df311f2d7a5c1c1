"""Responses written from plain dicts (bridge.kafka_api.encoding) are the bytes kio writes for
the entity build() makes of the same dict: for every response version the listener answers,
with bodies drawn at random from each version's own fields (nested entities, arrays, nulls,
tagged fields, fields left out), and for the Produce answers the handler gives."""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
import typing
import uuid
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from bridge.kafka_api import encoding
from bridge.kafka_api.partition import Outcome
from bridge.kafka_api.produce import _Answer, _response
from bridge.kafka_api.protocol import SUPPORTED, encode_response

VERSIONS = [
    (key, version) for key, (_, low, high) in SUPPORTED.items() for version in range(low, high + 1)
]
_INTS = {
    "int8": 7,
    "int16": 15,
    "int32": 31,
    "int64": 63,
    "uint8": 0,
    "uint16": 0,
    "uint32": 0,
    "uint64": 0,
}


def with_kio(entity_type: Any, body: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    entity_writer(entity_type)(out, encoding.build(entity_type, body))
    return out.getvalue()


def ours(entity_type: Any, body: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    encoding.write(entity_type, out, body)
    return out.getvalue()


def primitive(kafka_type: str, rng: random.Random) -> Any:
    if kafka_type in _INTS:
        bits = _INTS[kafka_type]
        if bits == 0:
            return rng.randrange(0, 200)
        return rng.choice([0, -1, 1, 2**bits - 1, -(2**bits), rng.randrange(-100, 100)])
    if kafka_type == "string":
        return rng.choice(["", "t", "events-ü", "x" * 200])
    if kafka_type in ("bytes", "records"):
        return rng.choice([b"", b"\x00\x01", b"y" * 300])
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if kafka_type == "float64":
        return rng.random()
    if kafka_type == "error_code":
        return rng.choice(list(ErrorCode))
    if kafka_type.startswith("timedelta"):
        ms = rng.randrange(0, 100_000)
        return ms if rng.random() < 0.5 else datetime.timedelta(milliseconds=ms)
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(rng.randrange(0, 2**40) / 1000, tz=datetime.UTC)
    raise AssertionError(f"no values for {kafka_type}")


def body_of(entity_type: Any, rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """A plain dict for `entity_type`: some fields left out, nulls where allowed."""
    body: dict[str, Any] = {}
    for field in dataclasses.fields(entity_type):
        if field.name.startswith("__") or rng.random() < 0.2:
            continue
        tagged = get_field_tag(field) is not None
        nullable = is_optional(field) and not tagged
        if nullable and rng.random() < 0.25:
            body[field.name] = None
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityField):
            body[field.name] = body_of(kind.type_, rng, depth + 1)
        elif isinstance(kind, EntityTupleField):
            count = rng.randrange(0, 3 if depth < 3 else 1)
            body[field.name] = [body_of(kind.type_, rng, depth + 1) for _ in range(count)]
        elif isinstance(kind, PrimitiveTupleField):
            kafka_type = get_schema_field_type(field)
            body[field.name] = [primitive(kafka_type, rng) for _ in range(rng.randrange(0, 4))]
        else:
            body[field.name] = primitive(get_schema_field_type(field), rng)
    return body


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_random_bodies_are_written_as_kio_writes_them(api_key: int, version: int) -> None:
    response_type: Any = load_response_schema(api_key, version)
    rng = random.Random(api_key * 100 + version)
    for _ in range(40):
        body = body_of(response_type, rng)
        assert ours(response_type, body) == with_kio(response_type, body), body
    assert ours(response_type, {}) == with_kio(response_type, {})
    header: Any = response_type.__header_schema__
    assert ours(header, {"correlation_id": 17}) == with_kio(header, {"correlation_id": 17})


def test_tagged_fields_given_are_written_in_tag_order() -> None:
    response_type: Any = load_response_schema(0, 12)
    tagged = {f.name for f in dataclasses.fields(response_type) if get_field_tag(f) is not None}
    assert "node_endpoints" in tagged
    body = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {"index": 0, "current_leader": {"leader_id": 3, "leader_epoch": 4}}
                ],
            }
        ],
        "node_endpoints": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
    }
    assert ours(response_type, body) == with_kio(response_type, body)
    # A tagged field at its default is left out, as kio leaves it out.
    default: dict[str, Any] = {"responses": [], "node_endpoints": []}
    assert ours(response_type, default) == with_kio(response_type, default)


@pytest.mark.parametrize("version", range(3, 13))
def test_produce_answers_are_the_bytes_kio_writes(version: int) -> None:
    answers = [
        _Answer("events", 0, Outcome(base_offset=1_000)),
        _Answer("events", 1, Outcome(base_offset=5, log_append_time_ms=1_700_000_000_123)),
        _Answer(
            "other",
            0,
            Outcome(
                ErrorCode.invalid_record,
                message="the partition carries no records",
                record_errors=[(2, "bad"), (3, None)],  # type: ignore[list-item]
            ),
        ),
    ]
    body = _response(answers, 250)
    response_type: Any = load_response_schema(0, version)
    header: Any = response_type.__header_schema__
    expected = with_kio(header, {"correlation_id": 9}) + with_kio(response_type, body)
    frame = encode_response(0, version, 9, body)
    assert frame[4:] == expected
    assert int.from_bytes(frame[:4], "big") == len(expected)


def test_an_entity_given_as_an_entity_is_written_by_kio() -> None:
    response_type: Any = load_response_schema(3, 12)
    body = body_of(response_type, random.Random(5))
    built = encoding.build(response_type, body)
    hints = typing.get_type_hints(response_type)
    assert "brokers" in hints
    mixed = {**body, "brokers": built.brokers}
    assert ours(response_type, mixed) == with_kio(response_type, body)
