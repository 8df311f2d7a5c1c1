"""Running plateau's Kafka API listener in a test, and speaking its protocol by hand for the
cases real clients never produce (duplicates on purpose, broken frames)."""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from bridge.config import Config, parse_config
from bridge.kafka_api.encoding import build
from bridge.kafka_api.server import KafkaApiServer
from bridge.store import open_store
from plateau_core import Store


def api_config(
    data_dir: Path,
    topics: list[dict[str, Any]] | None = None,
    manifest_url: str | None = None,
    **api: Any,
) -> Config:
    return parse_config(
        {
            "storage": {"data_dir": str(data_dir), "manifest_url": manifest_url},
            "kafka_api": {"listen": "127.0.0.1:0", **api},
            "topics": topics if topics is not None else [{"name": "events", "partitions": 2}],
            "shutdown_timeout": "20s",
        }
    )


@contextmanager
def listening(config: Config) -> Iterator[tuple[KafkaApiServer, str]]:
    """The listener over the config's store; yields it and its bootstrap address."""
    store = open_store(config)
    server = KafkaApiServer(config, store)
    try:
        host, port = server.start()
        yield server, f"{host}:{port}"
    finally:
        server.stop()
        store.close()


def stored(data_dir: Path, topic: str, manifest_url: str | None = None) -> pa.Table:
    store = Store.open(data_dir, manifest_url=manifest_url)
    try:
        return store.read(topic).to_table()
    finally:
        store.close()


def record_batch(
    values: list[bytes],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    codec: int = 0,
    timestamp: int = 1_700_000_000_000,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 30,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=timestamp + i, key=b"k%d" % i, value=value, headers=[])
    return bytes(builder.build())


class RawClient:
    """One connection speaking the protocol with kio's entities, as a client would."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def request_frame(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        request_type: Any = load_request_schema(api_key, version)
        header_type: Any = request_type.__header_schema__
        out = io.BytesIO()
        self.correlation += 1
        entity_writer(header_type)(
            out,
            header_type(
                request_api_key=api_key,
                request_api_version=version,
                correlation_id=self.correlation,
                client_id="plateau-tests",
            ),
        )
        entity_writer(request_type)(out, build(request_type, body))
        return out.getvalue()

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.send_frame(self.request_frame(api_key, version, body))
        return self.response(api_key, version)

    def response(self, api_key: int, version: int) -> Any:
        frame = self.read_frame()
        response_type: Any = load_response_schema(api_key, version)
        header, used = entity_reader(response_type.__header_schema__)(frame, 0)
        assert header.correlation_id == self.correlation
        body, _ = entity_reader(response_type)(frame, used)
        return body

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._exactly(4))
        return self._exactly(size)

    def closed_by_peer(self) -> bool:
        """True when the listener closed this connection (EOF), within the socket timeout."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(size)
            if not chunk:
                raise ConnectionError("closed by the listener")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)


def produce_body(topic: str, partition: int, records: bytes, acks: int = -1) -> dict[str, Any]:
    return {
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }
