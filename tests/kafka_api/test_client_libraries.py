"""Producers of client libraries beside librdkafka and the Java client (test_librdkafka.py,
test_tools.py), none written here: aiokafka and kafka-python, and the Go clients franz-go,
sarama and kafka-go (tests/kafka_api/go_clients). Each writes with each codec, idempotent
where the client can be, and through SASL (SCRAM and PLAIN); what it was told was
acknowledged is read back from the store: every record exactly once, at the partition and
offset it was given, with its key, value, header and timestamp."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from kafka import KafkaProducer
from structlog.testing import capture_logs

from bridge.config import Config
from plateau_core import Store
from tests.kafka_api import go_producers
from tests.kafka_api.support import api_config, listening, stored

N = 200
FIRST_MS = 1_700_000_000_000  # record i's timestamp is FIRST_MS + i
PARTITIONS = 3
USER, PASSWORD = "ingest", "ingest-secret"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# A codec per case, idempotence on in every other: each codec and both modes are covered
# without every combination (a case costs a producer's start and a listener's).
CASES = [(codec, i % 2 == 1) for i, codec in enumerate(CODECS)]
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]

Acked = list[tuple[bytes, int, int]]  # (key, partition, offset) of each acknowledged record


def config(data_dir: Path, *, sasl: bool = False) -> Config:
    api: dict[str, Any] = {}
    if sasl:
        api["sasl"] = {
            "mechanisms": MECHANISMS,
            "users": [{"name": USER, "password": PASSWORD}],
        }
    return api_config(data_dir, [{"name": "events", "partitions": PARTITIONS}], **api)


def check_landed(data_dir: Path, acked: Acked) -> None:
    assert sorted(key for key, _, _ in acked) == sorted(b"key-%d" % i for i in range(N))
    placed = {key: (partition, offset) for key, partition, offset in acked}
    landed = 0
    with Store.open(data_dir) as store:
        for partition in range(PARTITIONS):
            rows = store.read("events", partitions=[partition]).to_table().to_pylist()
            # A new topic's offsets: contiguous from 0 in each partition.
            assert [r["offset"] for r in rows] == list(range(len(rows)))
            for row in rows:
                i = int(row["key"].removeprefix(b"key-"))
                assert placed[row["key"]] == (partition, row["offset"])
                assert row["value"] == b"value-%d" % i
                assert row["headers"] == [{"key": "n", "value": str(i).encode()}]
                assert int(row["timestamp"].timestamp() * 1000) == FIRST_MS + i
            landed += len(rows)
    assert landed == N


def records() -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    return [
        (b"key-%d" % i, b"value-%d" % i, [("n", str(i).encode())], FIRST_MS + i) for i in range(N)
    ]


def with_aiokafka(bootstrap: str, settings: dict[str, Any]) -> Acked:
    async def produce() -> Acked:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **settings)
        await producer.start()
        try:
            sent = [
                (key, await producer.send("events", value, key, timestamp_ms=ts, headers=hs))
                for key, value, hs, ts in records()
            ]
            return [(key, (md := await future).partition, md.offset) for key, future in sent]
        finally:
            await producer.stop()

    return asyncio.run(asyncio.wait_for(produce(), 120))


def with_kafka_python(bootstrap: str, settings: dict[str, Any]) -> Acked:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **settings)
    try:
        sent = [
            (key, producer.send("events", value, key, hs, timestamp_ms=ts))
            for key, value, hs, ts in records()
        ]
        producer.flush(60)
        return [(key, (md := future.get(60)).partition, md.offset) for key, future in sent]
    finally:
        producer.close(10)


PYTHON_CLIENTS = {"aiokafka": with_aiokafka, "kafka-python": with_kafka_python}


def python_settings(codec: str, idempotent: bool) -> dict[str, Any]:
    return {
        "compression_type": None if codec == "none" else codec,
        "enable_idempotence": idempotent,
    }


def sasl_settings(mechanism: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }


@pytest.mark.parametrize("client", list(PYTHON_CLIENTS))
@pytest.mark.parametrize(("codec", "idempotent"), CASES, ids=[c for c, _ in CASES])
def test_python_clients(tmp_path: Path, client: str, codec: str, idempotent: bool) -> None:
    with listening(config(tmp_path / "store")) as (_server, bootstrap):
        acked = PYTHON_CLIENTS[client](bootstrap, python_settings(codec, idempotent))
    check_landed(tmp_path / "store", acked)


@pytest.mark.parametrize("client", list(PYTHON_CLIENTS))
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_python_clients_through_sasl(tmp_path: Path, client: str, mechanism: str) -> None:
    with listening(config(tmp_path / "store", sasl=True)) as (_server, bootstrap):
        acked = PYTHON_CLIENTS[client](bootstrap, sasl_settings(mechanism))
    check_landed(tmp_path / "store", acked)


GO_CLIENTS = ["franz-go", "sarama", "kafka-go"]


@pytest.mark.parametrize("client", GO_CLIENTS)
@pytest.mark.parametrize(("codec", "idempotent"), CASES, ids=[c for c, _ in CASES])
def test_go_clients(tmp_path: Path, client: str, codec: str, idempotent: bool) -> None:
    # kafka-go's writer has no idempotent mode; its cases run as the others ask otherwise.
    with listening(config(tmp_path / "store")) as (_server, bootstrap):
        acked = go_producers.produce(
            client, bootstrap, "events", N, compression=codec, idempotent=idempotent
        )
    check_landed(tmp_path / "store", acked)


@pytest.mark.parametrize("client", GO_CLIENTS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_go_clients_through_sasl(tmp_path: Path, client: str, mechanism: str) -> None:
    with listening(config(tmp_path / "store", sasl=True)) as (_server, bootstrap):
        acked = go_producers.produce(
            client, bootstrap, "events", N, sasl=(mechanism, USER, PASSWORD)
        )
    check_landed(tmp_path / "store", acked)


@pytest.mark.parametrize("client", GO_CLIENTS)
def test_a_wrong_password_lands_nothing(tmp_path: Path, client: str) -> None:
    """Refused at authentication: sarama and kafka-go give up on the error, franz-go keeps
    trying until its deadline (its choice: a client may be given a new password)."""
    with (
        listening(config(tmp_path / "store", sasl=True)) as (_server, bootstrap),
        capture_logs() as logs,
        pytest.raises(AssertionError, match=f"{client} failed"),
    ):
        go_producers.produce(
            client, bootstrap, "events", 10, sasl=("SCRAM-SHA-512", USER, "not-it"), timeout_s=5
        )
    refused = {e["error"] for e in logs if e["event"] == "sasl_failed"}
    assert refused == {f"wrong password for user '{USER}'"}
    assert stored(tmp_path / "store", "events").num_rows == 0
