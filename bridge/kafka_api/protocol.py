"""Kafka protocol messages: which APIs and versions plateau answers, and the requests and
responses as kio's generated entities (one dataclass per API version, from Kafka's own
message schemas), so no field layout is written by hand here, except one: Produce requests
are read in place for speed (bridge.kafka_api.produce_request), checked against kio's.

Handlers build responses as plain dicts; `encode_response` fits them to the version asked
for (bridge.kafka_api.encoding), leaving out fields that version does not have and filling
the rest with their protocol defaults. One handler thereby answers every version of its API.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from bridge.kafka_api import encoding
from bridge.kafka_api.bounds import NullArrayError, check_header, check_request
from bridge.kafka_api.produce_request import ProduceRequestError, read_produce

# api key -> (name, lowest, highest version answered). The ranges are what current
# librdkafka (2.x) and the Apache Kafka 4.x Java clients ask for; Produce stops at 12
# because 13 names topics by id only.
SUPPORTED: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 12),
    # v0 went with Kafka 4.0; v1-10 are what its brokers list.
    2: ("ListOffsets", 1, 10),
    # Listed, never served: librdkafka writes record batches v2 (and so can be idempotent)
    # only to a broker that lists Fetch v4. A Fetch is answered UNSUPPORTED_VERSION.
    1: ("Fetch", 4, 12),
    3: ("Metadata", 0, 12),
    # v0 is listed, never served (raw SASL tokens would follow it): older librdkafka (2.0)
    # takes SASL for supported only when v0 is in the range, as every Kafka broker lists
    # it, and then sends v1. A v0 handshake is answered UNSUPPORTED_VERSION.
    17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 2, 7),
    22: ("InitProducerId", 0, 5),
    32: ("DescribeConfigs", 1, 4),
    36: ("SaslAuthenticate", 0, 2),
    # v1-4: what Kafka 4 lists (v5 is newer than its clients).
    35: ("DescribeLogDirs", 1, 4),
    37: ("CreatePartitions", 0, 3),
    60: ("DescribeCluster", 0, 1),
}
PRODUCE, FETCH, METADATA, SASL_HANDSHAKE, API_VERSIONS = 0, 1, 3, 17, 18
CREATE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS, SASL_AUTHENTICATE = 19, 22, 32, 36
DESCRIBE_CLUSTER, LIST_OFFSETS, CREATE_PARTITIONS, DESCRIBE_LOG_DIRS = 60, 2, 37, 35
# What a connection may send before it has authenticated.
BEFORE_AUTH = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})

_PREFIX = struct.Struct(">hhi")


class ProtocolError(Exception):
    """A frame that is not a request plateau can read; the connection is closed."""


class UnsupportedRequestError(ProtocolError):
    """A well-framed request of an API or version plateau does not answer."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        name = SUPPORTED.get(api_key, (f"api key {api_key}",))[0]
        super().__init__(f"{name} v{api_version} is not supported")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(frozen=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # The kio entity of this API and version; of Produce, produce_request's ProduceRequest
    # (the same field names and values, its records views of the frame).
    body: Any


def api_name(api_key: int) -> str:
    return SUPPORTED.get(api_key, (f"api key {api_key}",))[0]


def parse_request(frame: bytes | memoryview) -> Request:
    """The request in one frame (without its size prefix). Produce is read in place
    (bridge.kafka_api.produce_request: its records are views of the frame), every other API
    by kio's reader.

    Raises UnsupportedRequestError for a readable header of an API or version not answered,
    ProtocolError for anything that does not parse."""
    api_key, api_version, correlation_id = _prefix(frame)
    if api_key != PRODUCE:
        return _parse_with_kio(frame, api_key, api_version, correlation_id)
    try:
        client_id, body = read_produce(frame, api_version)
    except ProduceRequestError as exc:
        raise ProtocolError(f"Produce v{api_version} request does not parse: {exc}") from exc
    return Request(api_key, api_version, correlation_id, client_id, body)


def parse_with_kio(frame: bytes | memoryview) -> Request:
    """The request in one frame as kio's entities, Produce too: the reference the in-place
    Produce reader is checked against (tests, fuzz target). Raises as parse_request."""
    return _parse_with_kio(frame, *_prefix(frame))


def _prefix(frame: bytes | memoryview) -> tuple[int, int, int]:
    """API key, version and correlation id, of an API and version answered."""
    if len(frame) < _PREFIX.size:
        raise ProtocolError(f"a request of {len(frame)} bytes is shorter than its header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame)
    supported = SUPPORTED.get(api_key)
    if supported is None or not supported[1] <= api_version <= supported[2]:
        raise UnsupportedRequestError(api_key, api_version, correlation_id)
    return api_key, api_version, correlation_id


def _parse_with_kio(
    frame: bytes | memoryview, api_key: int, api_version: int, correlation_id: int
) -> Request:
    request_type = _request_type(api_key, api_version)
    try:
        # kio's reader trusts counts on the wire (bounds.py says why): check them first.
        check_header(request_type.__header_schema__, frame)
        header, used = _reader(request_type.__header_schema__)(frame, 0)
        check_request(request_type, frame, used)
        body, _ = _reader(request_type)(frame, used)
    except NullArrayError as exc:
        # kio reads a length of -1 as None whatever the schema says; Kafka refuses it where
        # the array has no null versions, and the handlers count on that.
        raise ProtocolError(
            f"{api_name(api_key)} v{api_version} request carries a null {exc.path}"
        ) from exc
    # kio's own errors, and what its readers let through on damaged input (KeyError for a
    # tagged field it does not know, OverflowError, ...): all mean the frame is unreadable.
    except (SerialError, ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
        raise ProtocolError(
            f"{api_name(api_key)} v{api_version} request does not parse: {exc}"
        ) from exc
    # Bytes after the request's end are left alone, as Kafka's own parser leaves them:
    # librdkafka's Metadata v12 carries three (its AdminClient's list_topics).
    return Request(api_key, api_version, correlation_id, header.client_id, body)


def encode_response(
    api_key: int, api_version: int, correlation_id: int, body: dict[str, Any]
) -> bytes:
    """The size-prefixed response frame of this API version carrying `body`."""
    response_type = _response_type(api_key, api_version)
    header_type: Any = response_type.__header_schema__
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    encoding.write(header_type, out, {"correlation_id": correlation_id})
    encoding.write(response_type, out, body)
    frame = out.getbuffer()
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


def error_response(request: UnsupportedRequestError | Request, code: ErrorCode) -> bytes | None:
    """A response carrying only `code` at its top level, for APIs whose response has a
    top-level error code; None when it has none (the connection is then closed)."""
    api_key, version = request.api_key, request.api_version
    if isinstance(request, UnsupportedRequestError) and api_key == API_VERSIONS:
        # Kafka's rule: an ApiVersions version not understood is answered in v0 with the
        # versions that are, so the client can pick one.
        version = 0
    try:
        response_type = load_response_schema(api_key, version)
    except Exception:  # kio knows no such API or version
        return None
    names = {f.name for f in dataclasses.fields(response_type)}
    if "error_code" not in names:
        return None
    body: dict[str, Any] = {"error_code": code}
    if api_key == API_VERSIONS:
        body["api_keys"] = api_versions()
    return encode_response(api_key, version, request.correlation_id, body)


def negotiating(request: UnsupportedRequestError) -> bool:
    """An ApiVersions newer than the listener's: answered with the versions it has, in v0."""
    return request.api_key == API_VERSIONS and request.api_version > SUPPORTED[API_VERSIONS][2]


def api_versions() -> list[dict[str, int]]:
    return [
        {"api_key": key, "min_version": low, "max_version": high}
        for key, (_, low, high) in sorted(SUPPORTED.items())
    ]


@cache
def _response_type(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


@cache
def _request_type(api_key: int, api_version: int) -> Any:
    return load_request_schema(api_key, api_version)


@cache
def _reader(entity_type: type[Any]) -> Any:
    return entity_reader(entity_type)
