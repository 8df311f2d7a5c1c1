"""The schema-registry formats decode what confluent-kafka's serializers write, through a
registry over HTTP: typed columns equal to the produced objects, evolution, poison with
reasons, and an unreachable registry that changes nothing."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from bridge.config import parse_config
from bridge.config.registry import SchemaRegistryConfig
from bridge.config.topics import TopicMapping
from bridge.errors import BridgeError, ConfigError
from bridge.ingest.decode import Decoded, RegistryUnavailableError, decoder_for
from bridge.ingest.decode.schema_format import SchemaDecoder
from bridge.ingest.decode.wire import unframe
from bridge.ingest.records import envelope
from bridge.ops.check import check
from plateau_core.schema import HEADERS_TYPE, TIMESTAMP_TYPE
from plateau_core.schema_merge import merged_schema
from tests.registry_server import RegistryServer
from tests.schema_support import (
    EVENT_SCHEMA,
    ORDER_V1,
    ORDER_V2,
    ORDER_V3_INCOMPATIBLE,
    avro_key_serializer,
    avro_serializer,
    event,
    json_serializer,
    order,
    protobuf_serializer,
    reading,
    reading_class,
    stored_event,
    stored_order,
    stored_reading,
)

ENVELOPE_COLUMNS = {"offset", "timestamp", "key", "headers"}


@pytest.fixture
def registry() -> Iterator[RegistryServer]:
    with RegistryServer() as server:
        yield server


def _decoder(
    server: RegistryServer, fmt: str, key_format: str = "raw", retry: float = 2.0
) -> SchemaDecoder:
    mapping = TopicMapping(source="t", format=fmt, key_format=key_format)  # type: ignore[arg-type]
    config = SchemaRegistryConfig(url=server.url, retry_interval=retry)
    decoder = decoder_for(mapping, config)
    assert isinstance(decoder, SchemaDecoder)
    return decoder


def _records(values: Sequence[bytes | None], keys: Sequence[bytes | None] = ()) -> pa.RecordBatch:
    n = len(values)
    return envelope(
        pa.array(range(100, 100 + n), pa.int64()),
        pa.array([1_700_000_000_000] * n, TIMESTAMP_TYPE),
        pa.array(list(keys) or [None] * n, pa.binary()),
        pa.array([None] * n, HEADERS_TYPE),
        pa.array(values, pa.binary()),
    )


def _rows(decoded: Decoded) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in row.items() if k not in ENVELOPE_COLUMNS}
        for batch in decoded.batches
        for row in batch.to_pylist()
    ]


def test_avro_values_land_as_the_produced_objects(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    serialize = avro_serializer(client, ORDER_V1, "orders")
    produced = [order(i) for i in range(200)]
    decoded = _decoder(registry, "avro").decode(_records([serialize(o) for o in produced]))
    assert decoded.poison == []
    assert len(decoded.batches) == 1
    schema = decoded.batches[0].schema
    assert schema.field("price").type == pa.decimal128(10, 2)
    assert schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("attrs").type == pa.map_(pa.string(), pa.int64())
    assert schema.field("either").type == pa.struct(
        [pa.field("member0", pa.int64()), pa.field("member1", pa.string())]
    )
    assert schema.field("day").type == pa.date32()
    assert _rows(decoded) == [stored_order(o) for o in produced]


def test_protobuf_values_land_as_the_produced_messages(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    cls = reading_class()
    serialize = protobuf_serializer(client, cls, "readings")
    produced = [reading(cls, i) for i in range(120)]
    decoded = _decoder(registry, "protobuf").decode(_records([serialize(m) for m in produced]))
    assert decoded.poison == []
    schema = decoded.batches[0].schema
    assert schema.field("status").type == pa.string()
    assert schema.field("big").type == pa.decimal128(20, 0)
    assert schema.field("labels").type == pa.map_(pa.string(), pa.string())
    rows = _rows(decoded)
    for row in rows:
        row["labels"] = sorted(row["labels"])
    assert rows == [stored_reading(m) for m in produced]


def test_json_schema_values_land_and_a_mismatch_is_poison(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    serialize = json_serializer(client, EVENT_SCHEMA, "events")
    produced = [event(i) for i in range(100)]
    values = [serialize(e) for e in produced]
    # The serializer validates too: forge a record that claims the schema but breaks it.
    forged = values[0][:5] + b'{"name": "x", "count": "not a number"}'
    decoded = _decoder(registry, "json_schema").decode(_records([*values, forged]))
    assert [p.offset for p in decoded.poison] == [200]
    assert "count" in decoded.poison[0].error
    assert "does not match its JSON Schema" in decoded.poison[0].error
    assert decoded.batches[0].schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert _rows(decoded) == [stored_event(e) for e in produced]


def test_evolution_widens_columns_and_an_incompatible_version_is_poison(
    registry: RegistryServer,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    v1 = avro_serializer(client, ORDER_V1, "evolving")
    v2 = avro_serializer(client, ORDER_V2, "evolving")
    v3 = avro_serializer(client, ORDER_V3_INCOMPATIBLE, "evolving")
    values = [v1(order(i)) for i in range(3)]
    values += [v2(order(i, version=2)) for i in range(3, 6)]
    values += [v3(order(i, version=3)) for i in range(6, 8)]
    values += [v1(order(8))]
    decoder = _decoder(registry, "avro")
    decoded = decoder.decode(_records(values))
    assert [b.num_rows for b in decoded.batches] == [3, 3, 1]
    assert "channel" not in decoded.batches[0].schema.names
    assert decoded.batches[1].schema.field("channel").type == pa.string()
    # Old records after the new version land in the evolved columns, channel null.
    assert decoded.batches[2].schema == decoded.batches[1].schema
    assert decoded.batches[2].column("channel").to_pylist() == [None]
    assert [p.offset for p in decoded.poison] == [106, 107]
    error = decoded.poison[0].error
    assert "subject evolving-value version 3" in error
    assert "incompatible" in error


def test_an_unknown_schema_id_and_bad_framing_are_poison_with_reasons(
    registry: RegistryServer,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    good = avro_serializer(client, ORDER_V1, "orders")(order(1))
    values = [good, b"\x00\x00\x00\x03\xe7rest", b'{"not": "framed"}', None, good[:12]]
    decoded = _decoder(registry, "avro").decode(_records(values))
    errors = {p.offset: p.error for p in decoded.poison}
    assert set(errors) == {101, 102, 103, 104}
    assert "schema id 999 is not in the schema registry" in errors[101]
    assert "first byte is 0x7b" in errors[102]
    assert "tombstone" in errors[103]
    assert "does not decode with schema id 1 (subject orders-value version 1)" in errors[104]
    assert _rows(decoded) == [stored_order(order(1))]


def test_an_unreachable_registry_raises_before_anything_changes(
    registry: RegistryServer,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    value = avro_serializer(client, ORDER_V1, "orders")(order(7))
    decoder = _decoder(registry, "avro", retry=0.2)
    registry.stop()
    with pytest.raises(RegistryUnavailableError, match="unreachable"):
        decoder.decode(_records([value]))
    assert decoder.known is None
    registry.start()
    with pytest.raises(RegistryUnavailableError):  # within retry_interval: not asked again
        decoder.decode(_records([value]))
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=5)
    while True:
        try:
            decoded = decoder.decode(_records([value]))
            break
        except RegistryUnavailableError:
            assert datetime.datetime.now() < deadline
    assert _rows(decoded) == [stored_order(order(7))]


def test_keys_decode_into_key_decoded_beside_the_key_bytes(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    value = avro_serializer(client, ORDER_V1, "keyed")
    key = avro_key_serializer(client, "keyed")
    keys = [key({"id": i}) for i in range(3)] + [None]
    records = _records([value(order(i)) for i in range(4)], keys)
    decoded = _decoder(registry, "avro", key_format="avro").decode(records)
    assert decoded.poison == []
    rows = [r for b in decoded.batches for r in b.to_pylist()]
    assert [r["key_decoded"] for r in rows] == [{"id": 0}, {"id": 1}, {"id": 2}, None]
    assert [r["key"] for r in rows] == keys


def test_a_schema_of_another_kind_is_poison(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    value = json_serializer(client, EVENT_SCHEMA, "mixed")(event(1))
    decoded = _decoder(registry, "avro").decode(_records([value]))
    assert len(decoded.poison) == 1
    assert "is a JSON schema; the topic's format is avro" in decoded.poison[0].error


def test_seeded_columns_keep_a_restart_from_narrowing(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    v1 = avro_serializer(client, ORDER_V1, "restarted")
    first = _decoder(registry, "avro")
    before = first.decode(_records([v1(order(1))])).batches[0].schema
    widened = pa.schema([*before, pa.field("channel", pa.string())])
    second = _decoder(registry, "avro")
    second.seed(widened)
    after = second.decode(_records([v1(order(2))])).batches[0].schema
    assert after.field("channel").type == pa.string()


def _avro_times(logical: str) -> dict[str, Any]:
    """A record with a timestamp of Avro's `logical` type at the top level and inside a
    record, an array and a map."""
    stamp = {"type": "long", "logicalType": logical}
    inner = {"type": "record", "name": "In", "fields": [{"name": "t", "type": stamp}]}
    return {
        "type": "record",
        "name": "Times",
        "fields": [
            {"name": "at", "type": stamp},
            {"name": "o", "type": inner},
            {"name": "l", "type": {"type": "array", "items": stamp}},
            {"name": "m", "type": {"type": "map", "values": stamp}},
        ],
    }


def test_a_timestamp_that_gains_or_loses_its_zone_lands_in_utc_before_and_after_a_restart(
    registry: RegistryServer,
) -> None:
    """A version with `local-timestamp-micros` (naive) and one with `timestamp-micros` (UTC)
    merge as the readers merge such a column, into a timestamp in UTC with the naive values
    taken as UTC: both versions' records land, the batches holding the merged column, and
    so they do after a restart seeded with it. A version that changed the zone was
    incompatible, its records per on_error; a field that turns into text still is."""
    client = SchemaRegistryClient({"url": registry.url})
    naive = avro_serializer(client, _avro_times("local-timestamp-micros"), "zoned")
    zoned = avro_serializer(client, _avro_times("timestamp-micros"), "zoned")
    text = avro_serializer(client, _avro_record(("at", "string")), "zoned")
    noon = datetime.datetime(2024, 1, 1, 12)

    def times(when: datetime.datetime) -> dict[str, Any]:
        return {"at": when, "o": {"t": when}, "l": [when], "m": {"k": when}}

    utc = datetime.UTC
    decoder = _decoder(registry, "avro")
    values = [naive(times(noon)), zoned(times(noon.replace(tzinfo=utc, hour=13)))]
    values += [naive(times(noon.replace(hour=14))), text({"at": "noon"})]
    decoded = [decoder.decode(_records([v])) for v in values]
    assert [len(d.poison) for d in decoded] == [0, 0, 0, 1]
    assert "incompatible with the topic's columns" in decoded[3].poison[0].error
    in_utc = pa.timestamp("us", tz="UTC")
    assert decoded[1].batches[0].schema.field("at").type == in_utc
    assert decoded[2].batches[0].schema == decoded[1].batches[0].schema
    # The first record landed before the column had a zone: naive, as sent.
    expected = [times(noon), *(times(noon.replace(tzinfo=utc, hour=h)) for h in (13, 14))]
    for row in expected:
        row["m"] = list(row["m"].items())
    assert [r for d in decoded for r in _rows(d)] == expected
    merged = merged_schema(b.schema for d in decoded for b in d.batches)
    assert merged.clashes == {} and merged.schema.field("at").type == in_utc
    restarted = _decoder(registry, "avro")
    restarted.seed(merged.settled())
    again = restarted.decode(_records([naive(times(noon))]))
    assert again.poison == []
    assert _rows(again)[0]["at"] == noon.replace(tzinfo=utc)
    assert again.batches[0].schema == decoded[1].batches[0].schema


def test_records_of_an_older_version_land_after_a_nested_long_became_a_double(
    registry: RegistryServer,
) -> None:
    """Avro promotes long to double; a version-1 record after version 2, its nested long
    beyond 2**53, raised out of decode instead of landing rounded, as it does in a
    top-level column."""
    client = SchemaRegistryClient({"url": registry.url})

    def version(number: str) -> dict[str, Any]:
        inner = {"type": "record", "name": "In", "fields": [{"name": "x", "type": number}]}
        return {
            "type": "record",
            "name": "Out",
            "fields": [{"name": "n", "type": number}, {"name": "o", "type": inner}],
        }

    v1 = avro_serializer(client, version("long"), "promoted")
    v2 = avro_serializer(client, version("double"), "promoted")
    big = 2**53 + 1
    decoder = _decoder(registry, "avro")
    values = [v1({"n": big, "o": {"x": big}}), v2({"n": 0.5, "o": {"x": 0.5}})]
    values.append(values[0])
    decoded = [decoder.decode(_records([v])) for v in values]
    assert [d.poison for d in decoded] == [[], [], []]
    assert [_rows(d) for d in decoded] == [
        [{"n": big, "o": {"x": big}}],
        [{"n": 0.5, "o": {"x": 0.5}}],
        [{"n": float(big), "o": {"x": float(big)}}],
    ]


def test_basic_auth_from_the_config_and_refused_credentials_pause() -> None:
    with RegistryServer(basic_auth=("plateau", "s3cret")) as server:
        client = SchemaRegistryClient({"url": server.url, "basic.auth.user.info": "plateau:s3cret"})
        value = avro_serializer(client, ORDER_V1, "secured")(order(3))
        auth = {"username": "plateau", "password": "s3cret"}
        config = SchemaRegistryConfig.model_validate({"url": server.url, "basic_auth": auth})
        mapping = TopicMapping(source="t", format="avro")
        decoded = decoder_for(mapping, config).decode(_records([value]))
        assert _rows(decoded) == [stored_order(order(3))]
        wrong = SchemaRegistryConfig.model_validate(
            {"url": server.url, "basic_auth": {**auth, "password": "wrong"}}
        )
        # Refused credentials are the registry not answering, not a bad record: nothing is
        # skipped while someone fixes them.
        with pytest.raises(RegistryUnavailableError, match="HTTP 401"):
            decoder_for(mapping, wrong).decode(_records([value]))


def test_check_asks_the_registry(tmp_path: Path) -> None:
    with RegistryServer() as server:
        config = parse_config(
            {
                "storage": {"data_dir": str(tmp_path)},
                "kafka_api": {"listen": "127.0.0.1:0"},
                "schema_registry": {"url": server.url},
                "topics": [{"name": "orders", "format": "avro"}],
            }
        )
        assert f"schema registry {server.url} answers: 0 subject(s)" in check(config)
    with pytest.raises(BridgeError, match=f"schema registry {server.url} does not answer"):
        check(config)


def test_a_password_in_the_registry_url_is_not_shown(tmp_path: Path) -> None:
    """The registry client takes user:password@ in the URL as its basic auth; check's
    answer, the decoder's error and the log show the URL without the password."""
    with RegistryServer() as server:
        pass  # a port that no longer answers
    url = server.url.replace("://", "://plateau:s3cret-pw@")
    config = parse_config(
        {
            "storage": {"data_dir": str(tmp_path)},
            "kafka_api": {"listen": "127.0.0.1:0"},
            "schema_registry": {"url": url},
            "topics": [{"name": "orders", "format": "avro"}],
        }
    )
    assert config.schema_registry is not None
    shown = server.url.replace("://", "://plateau:***@")
    with pytest.raises(BridgeError) as checked:
        check(config)
    assert f"schema registry {shown} does not answer" in str(checked.value)
    decoder = decoder_for(TopicMapping(source="t", format="avro"), config.schema_registry)
    with capture_logs() as logs, pytest.raises(RegistryUnavailableError) as down:
        decoder.decode(_records([b"\x00\x00\x00\x00\x01{}"]))
    assert f"schema registry {shown} unreachable" in str(down.value)
    assert "s3cret-pw" not in repr(logs)
    with pytest.raises(ConfigError) as refused:
        parse_config({"topics": [{"source": "t"}], "schema_registry": {"url": "u:s3cret-pw@host"}})
    assert "s3cret-pw" not in str(refused.value)


def test_an_avro_schema_that_references_another_subject(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "shop",
        "fields": [{"name": "city", "type": "string"}],
    }
    client.register_schema("address", Schema(json.dumps(address), "AVRO"))
    customer = {
        "type": "record",
        "name": "Customer",
        "namespace": "shop",
        "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "shop.Address"}],
    }
    reference = SchemaReference("shop.Address", "address", 1)
    schema_id = client.register_schema(
        "customers-value", Schema(json.dumps(customer), "AVRO", [reference])
    )
    named: dict[str, Any] = {}
    fastavro.parse_schema(address, named_schemas=named)
    parsed = fastavro.parse_schema(customer, named_schemas=named)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, parsed, {"name": "ada", "home": {"city": "london"}})
    value = b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()
    decoded = _decoder(registry, "avro").decode(_records([value]))
    assert decoded.poison == []
    assert _rows(decoded) == [{"name": "ada", "home": {"city": "london"}}]


def _customer_through_two_references(client: SchemaRegistryClient) -> tuple[int, bytes]:
    """A schema id naming Customer, whose Address (another subject) names Country (a third
    subject), and a record of it."""
    country = {
        "type": "record",
        "name": "Country",
        "namespace": "shop",
        "fields": [{"name": "code", "type": "string"}],
    }
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "shop",
        "fields": [{"name": "city", "type": "string"}, {"name": "country", "type": "Country"}],
    }
    customer = {
        "type": "record",
        "name": "Customer",
        "namespace": "shop",
        "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "Address"}],
    }
    client.register_schema("country", Schema(json.dumps(country), "AVRO"))
    to_country = [SchemaReference("shop.Country", "country", 1)]
    client.register_schema("address", Schema(json.dumps(address), "AVRO", to_country))
    to_address = [SchemaReference("shop.Address", "address", 1)]
    schema_id = client.register_schema(
        "customers-value", Schema(json.dumps(customer), "AVRO", to_address)
    )
    named: dict[str, Any] = {}
    for schema in (country, address):
        fastavro.parse_schema(schema, named_schemas=named)
    parsed = fastavro.parse_schema(customer, named_schemas=named)
    body = io.BytesIO()
    written = {"name": "ada", "home": {"city": "london", "country": {"code": "uk"}}}
    fastavro.schemaless_writer(body, parsed, written)
    return schema_id, b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()


CUSTOMER_ROW = {"name": "ada", "home": {"city": "london", "country": {"code": "uk"}}}


def test_references_of_references_are_followed(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    _, value = _customer_through_two_references(client)
    decoded = _decoder(registry, "avro").decode(_records([value]))
    assert decoded.poison == []
    assert _rows(decoded) == [CUSTOMER_ROW]


def test_references_come_with_the_prefetched_schema(registry: RegistryServer) -> None:
    """The Kafka API prefetches the schemas a batch names off its event loop, then decodes
    on it: the schemas they reference must already be in memory too."""
    client = SchemaRegistryClient({"url": registry.url})
    schema_id, value = _customer_through_two_references(client)
    decoder = _decoder(registry, "avro")
    assert decoder.unfetched([value], []) == [(schema_id, None)]
    decoder.source.prefetch(schema_id)
    assert decoder.unfetched([value], []) == []
    registry.stop()
    decoded = decoder.decode(_records([value]))
    assert _rows(decoded) == [CUSTOMER_ROW]


def test_a_soft_deleted_referenced_version_still_decodes(registry: RegistryServer) -> None:
    """Soft-deleting a subject's version keeps it for the records already written with it
    (Confluent's deserializers look deleted references up too)."""
    client = SchemaRegistryClient({"url": registry.url})
    _, value = _customer_through_two_references(client)
    registry.soft_deleted.add(("country", 1))
    decoded = _decoder(registry, "avro").decode(_records([value]))
    assert decoded.poison == []
    assert _rows(decoded) == [CUSTOMER_ROW]


def test_a_missing_referenced_version_is_poison_a_route_without_it_pauses(
    registry: RegistryServer,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    _, value = _customer_through_two_references(client)
    registry.registry._store.remove_by_subject("country")
    decoded = _decoder(registry, "avro").decode(_records([value]))
    [poison] = decoded.poison
    assert "subject country version 1" in poison.error
    assert "not in the schema registry" in poison.error

    # A 404 that is not the registry's (a proxy routing /schemas but not /subjects): the
    # registry did not answer, so nothing is skipped.
    class Unrouted(RegistryServer):
        def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
            if method == "GET" and path.startswith("/subjects/"):
                return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}
            return super().answer(method, path, body)

    with Unrouted() as proxy:
        client = SchemaRegistryClient({"url": proxy.url})
        _, value = _customer_through_two_references(client)
        with pytest.raises(RegistryUnavailableError, match="HTTP 404"):
            _decoder(proxy, "avro").decode(_records([value]))


def test_a_value_that_decodes_but_does_not_fit_its_column_is_poison_alone(
    registry: RegistryServer,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    serialize = avro_serializer(client, ORDER_V1, "orders")
    good = [serialize(order(i)) for i in range(3)]
    # Avro's decimal carries its digits as bytes: a writer can exceed the declared precision.
    parsed = fastavro.parse_schema(ORDER_V1)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, parsed, {**order(9), "price": decimal.Decimal("1e12")})
    too_wide = good[0][:5] + body.getvalue()
    decoded = _decoder(registry, "avro").decode(_records([good[0], too_wide, *good[1:]]))
    assert [p.offset for p in decoded.poison] == [101]
    assert "subject orders-value version 1" in decoded.poison[0].error
    assert "does not fit its columns" in decoded.poison[0].error
    assert _rows(decoded) == [stored_order(order(i)) for i in range(3)]


def test_a_url_that_reaches_no_registry_pauses_instead_of_skipping(
    registry: RegistryServer,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    value = avro_serializer(client, ORDER_V1, "orders")(order(1))
    mapping = TopicMapping(source="t", format="avro")
    # A path under which nothing answers: 404 without the registry's "schema not found" code.
    wrong = SchemaRegistryConfig(url=f"{registry.url}/not-the-registry")
    with pytest.raises(RegistryUnavailableError, match="HTTP 404"):
        decoder_for(mapping, wrong).decode(_records([value]))


def test_protobuf_and_json_schema_keys_beside_a_raw_value(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    cls = reading_class()
    proto_keys = [protobuf_serializer(client, cls, "by-reading")(reading(cls, i)) for i in range(2)]
    json_keys = [json_serializer(client, EVENT_SCHEMA, "by-event")(event(i)) for i in range(2)]
    for fmt, keys, expected in (
        ("protobuf", proto_keys, [stored_reading(reading(cls, i)) for i in range(2)]),
        ("json_schema", json_keys, [stored_event(event(i)) for i in range(2)]),
    ):
        decoded = _decoder(registry, "raw", key_format=fmt).decode(_records([b"v0", b"v1"], keys))
        assert decoded.poison == []
        rows = [r for b in decoded.batches for r in b.to_pylist()]
        assert [r["value"] for r in rows] == [b"v0", b"v1"]
        found = [r["key_decoded"] for r in rows]
        for row in found:
            if "labels" in row:
                row["labels"] = sorted(row["labels"])
        assert found == expected


def _avro_record(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Named",
        "fields": [{"name": name, "type": kind} for name, kind in fields],
    }


def test_fields_named_like_plateaus_columns_in_any_case_get_the_suffix(
    registry: RegistryServer,
) -> None:
    # Spark resolves names ignoring case: `Timestamp` beside plateau's `timestamp` made both
    # ambiguous; `partition` is the column readers add.
    client = SchemaRegistryClient({"url": registry.url})
    schema = _avro_record(("Timestamp", "long"), ("partition", "int"), ("KEY", "string"))
    serialize = avro_serializer(client, schema, "named")
    mapping = TopicMapping(source="t", format="avro", timestamp="field:Timestamp")
    decoder = decoder_for(mapping, SchemaRegistryConfig(url=registry.url))
    produced = {"Timestamp": 1_700_000_000_123, "partition": 7, "KEY": "k"}
    decoded = decoder.decode(_records([serialize(produced)]))
    assert decoded.poison == []
    (row,) = [r for b in decoded.batches for r in b.to_pylist()]
    assert _rows(decoded) == [{"Timestamp_": 1_700_000_000_123, "partition_": 7, "KEY_": "k"}]
    assert row["timestamp"] == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, datetime.UTC)


def test_a_field_and_its_suffixed_twin_in_one_schema_is_poison_not_a_lost_value(
    registry: RegistryServer,
) -> None:
    # `offset` is stored as `offset_`: beside a field `offset_`, one of the two values was
    # dropped without a word.
    client = SchemaRegistryClient({"url": registry.url})
    schema = _avro_record(("Offset", ["null", "long"]), ("Offset_", "long"))
    serialize = avro_serializer(client, schema, "twins")
    decoded = _decoder(registry, "avro").decode(
        _records(
            [serialize({"Offset": 1, "Offset_": 2}), serialize({"Offset": None, "Offset_": 3})]
        )
    )
    assert [p.offset for p in decoded.poison] == [100]
    assert "both present" in decoded.poison[0].error
    assert _rows(decoded) == [{"Offset_": 3}]


@pytest.mark.parametrize("name", ["key_decoded", "Key_Decoded"])
def test_a_value_field_named_key_decoded_is_kept_beside_the_decoded_key(
    registry: RegistryServer, name: str
) -> None:
    # The decoded key wrote over a value field of its column's name.
    client = SchemaRegistryClient({"url": registry.url})
    value = avro_serializer(client, _avro_record((name, "string")), f"keyed-{name}")
    key = avro_key_serializer(client, f"keyed-{name}")
    decoded = _decoder(registry, "avro", key_format="avro").decode(
        _records([value({name: "from the value"})], [key({"id": 1})])
    )
    assert decoded.poison == []
    assert _rows(decoded) == [{"key_decoded": {"id": 1}, f"{name}_": "from the value"}]


def test_a_restart_leaves_out_a_column_stored_before_its_field_took_the_suffix(
    registry: RegistryServer,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    serialize = avro_serializer(client, _avro_record(("Timestamp", "long")), "restarted-named")
    decoder = _decoder(registry, "avro")
    stored = [("offset", pa.int64()), ("Timestamp", pa.int64()), ("Timestamp_", pa.int64())]
    decoder.seed(pa.schema(stored))
    (batch,) = decoder.decode(_records([serialize({"Timestamp": 5})])).batches
    assert "Timestamp" not in batch.schema.names
    assert batch.column("Timestamp_").to_pylist() == [5]


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_random_bytes_behind_a_valid_header_are_rows_or_poison_never_an_exception(
    registry: RegistryServer, fmt: str
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    cls = reading_class()
    good = {
        "avro": lambda: avro_serializer(client, ORDER_V1, "fuzz")(order(5)),
        "protobuf": lambda: protobuf_serializer(client, cls, "fuzz")(reading(cls, 5)),
        "json_schema": lambda: json_serializer(client, EVENT_SCHEMA, "fuzz")(event(5)),
    }[fmt]()
    header = good[: len(good) - len(unframe(good, fmt == "protobuf").payload)]
    decoder = _decoder(registry, fmt)

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.binary(max_size=64), min_size=1, max_size=20), st.randoms())
    def check(payloads: list[bytes], rng: random.Random) -> None:
        values = []
        for payload in payloads:
            if rng.random() < 0.3:  # a real record with some bytes flipped or cut
                damaged = bytearray(good)
                for _ in range(rng.randint(1, 4)):
                    damaged[rng.randrange(5, len(damaged))] = rng.randrange(256)
                values.append(bytes(damaged[: rng.randint(5, len(damaged))]))
            else:
                values.append(header + payload)
        decoded = decoder.decode(_records(values))
        rows = sum(b.num_rows for b in decoded.batches)
        assert rows + len(decoded.poison) == len(values)
        assert all(p.error for p in decoded.poison)

    check()


def test_json_schema_refs_and_nullable_unions(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "definitions": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "properties": {
            "at": {"$ref": "#/definitions/point"},
            "maybe": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
            "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        },
    }
    serialize = json_serializer(client, schema, "refs")
    produced = [
        {"at": {"x": 1.5}, "maybe": None, "either": "a"},
        {"at": {"x": -2.0}, "maybe": 7, "either": 3},
    ]
    decoded = _decoder(registry, "json_schema").decode(_records([serialize(v) for v in produced]))
    assert decoded.poison == []
    assert decoded.batches[0].schema.field("at").type == pa.struct([pa.field("x", pa.float64())])
    assert decoded.batches[0].schema.field("maybe").type == pa.int64()
    assert _rows(decoded) == [
        {"at": {"x": 1.5}, "maybe": None, "either": '"a"'},
        {"at": {"x": -2.0}, "maybe": 7, "either": "3"},
    ]


def test_an_array_of_items_encoded_in_no_bytes_is_poison_not_a_hang(
    registry: RegistryServer,
) -> None:
    """Seven bytes can claim 2**40 nulls: the schema is refused before anything decodes."""
    client = SchemaRegistryClient({"url": registry.url})
    empty = {"type": "record", "name": "Nothing", "fields": []}
    for items in ("null", empty, {"type": "fixed", "name": "Zero", "size": 0}):
        schema = {
            "type": "record",
            "name": "Holder",
            "fields": [{"name": "many", "type": {"type": "array", "items": items}}],
        }
        schema_id = client.register_schema(f"zero-{items!r}", Schema(json.dumps(schema), "AVRO"))
        count = 2**40
        varint, zigzag = bytearray(), count << 1
        while zigzag >= 0x80:
            varint.append((zigzag & 0x7F) | 0x80)
            zigzag >>= 7
        varint.append(zigzag)
        value = b"\0" + schema_id.to_bytes(4, "big") + bytes(varint) + b"\0"
        decoded = _decoder(registry, "avro").decode(_records([value]))
        assert decoded.batches == [] or sum(b.num_rows for b in decoded.batches) == 0
        [poison] = decoded.poison
        assert "encoded in no bytes" in poison.error


def test_a_union_sets_the_branch_the_record_was_written_with(registry: RegistryServer) -> None:
    """A union of int and long, or float and double: a long too big for an int and a double
    that a float would round are stored whole, in the branch they were written with."""
    client = SchemaRegistryClient({"url": registry.url})
    schema = {
        "type": "record",
        "name": "Reading",
        "namespace": "shop",
        "fields": [
            {"name": "count", "type": ["int", "long"]},
            {"name": "level", "type": ["null", "float", "double"]},
            {
                "name": "state",
                "type": ["string", {"type": "enum", "name": "State", "symbols": ["ON", "OFF"]}],
            },
            {
                "name": "box",
                "type": [
                    "null",
                    "string",
                    {
                        "type": "record",
                        "name": "Box",
                        "fields": [{"name": "n", "type": ["int", "long"]}],
                    },
                ],
            },
        ],
    }
    schema_id = client.register_schema("unions-value", Schema(json.dumps(schema), "AVRO"))
    parsed = fastavro.parse_schema(schema)
    written = [
        {
            "count": ("long", 2**40),
            "level": ("double", 0.1),
            "state": ("shop.State", "ON"),
            "box": ("shop.Box", {"n": ("long", 9)}),
        },
        {
            "count": ("int", 7),
            "level": ("float", 0.5),
            "state": ("string", "ON"),
            "box": ("string", "b"),
        },
        {"count": ("long", 7), "level": None, "state": ("string", "free text"), "box": None},
    ]
    values = []
    for record in written:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, record)
        values.append(b"\0" + schema_id.to_bytes(4, "big") + body.getvalue())
    decoded = _decoder(registry, "avro").decode(_records(values))
    assert decoded.poison == []
    assert _rows(decoded) == [
        {
            "count": {"member0": None, "member1": 2**40},
            "level": {"member0": None, "member1": 0.1},
            "state": {"member0": None, "member1": "ON"},
            "box": {"member0": None, "member1": {"n": {"member0": None, "member1": 9}}},
        },
        {
            "count": {"member0": 7, "member1": None},
            "level": {"member0": 0.5, "member1": None},
            "state": {"member0": "ON", "member1": None},
            "box": {"member0": "b", "member1": None},
        },
        {
            "count": {"member0": None, "member1": 7},
            "level": None,
            "state": {"member0": "free text", "member1": None},
            "box": None,
        },
    ]


def test_a_schema_the_mapping_trips_on_makes_its_records_poison_not_an_exception(
    registry: RegistryServer,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    # A decimal whose precision is null, which fastavro lets through.
    decimal_type = {"type": "bytes", "logicalType": "decimal", "precision": None}
    schema = {"type": "record", "name": "Price", "fields": [{"name": "p", "type": decimal_type}]}
    schema_id = client.register_schema("odd-value", Schema(json.dumps(schema), "AVRO"))
    value = b"\0" + schema_id.to_bytes(4, "big") + b"\x02\x01"
    decoded = _decoder(registry, "avro").decode(_records([value]))
    [poison] = decoded.poison
    assert "(subject odd-value version 1) cannot be stored as columns" in poison.error


def test_a_json_schema_with_a_boolean_subschema_lands(registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    # `true` is a schema too (anything): the union is stored as JSON text.
    schema = {"type": "object", "properties": {"x": {"oneOf": [True, {"type": "integer"}]}}}
    serialize = json_serializer(client, schema, "booleans")
    decoded = _decoder(registry, "json_schema").decode(_records([serialize({"x": [1]})]))
    assert decoded.poison == []
    assert _rows(decoded) == [{"x": "[1]"}]
