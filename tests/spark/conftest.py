"""Stores built for the Spark tests: segments written through plateau_core's writer."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
from moto.server import ThreadedMotoServer

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_spark.replication import S3Settings, Target
from tests.support import BASE_MS, append_patiently, batch

MINUTE_MS = 60_000


def write_segments(
    store: Store, topic: str, partition: int, batches: list[pa.RecordBatch], roll_rows: int
) -> None:
    """Append `batches` to one partition; a segment is sealed every `roll_rows` rows."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire(topic, partition, roll=RollPolicy(max_rows=roll_rows, max_age_s=3600))
        for data in batches:
            append_patiently(writer, topic, partition, data)
        writer.flush()
    finally:
        writer.close()


def minute_batches(partition: int, segments: int, rows: int = 100) -> list[pa.RecordBatch]:
    """Segment i of the partition holds offsets [i*rows, (i+1)*rows) in minute i."""
    out = []
    for i in range(segments):
        offsets = list(range(i * rows, (i + 1) * rows))
        times = [BASE_MS + i * MINUTE_MS + partition * 10 + j for j in range(rows)]
        out.append(batch(offsets, times=times))
    return out


@pytest.fixture(params=["sqlite", "postgresql"])
def minutes_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Topic `t`, partitions 0-2, ten 100-row segments each; segment i spans minute i. Its
    manifest on SQLite, or on PostgreSQL (which the connector reads over JDBC as well)."""
    url = None
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres").new_database()
    store = Store.open(tmp_path / "data", manifest_url=url)
    for partition in range(3):
        write_segments(store, "t", partition, minute_batches(partition, 10), roll_rows=100)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3-compatible HTTP server on loopback (moto's server mode)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def s3_bucket_target(s3_endpoint: str, reach_at: str | None = None) -> Target:
    """A new bucket on the test S3 server, as a replication target reached at `reach_at`
    (the server itself by default; a relay in front of it in the outage test)."""
    bucket = f"plateau-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
    ).create_bucket(Bucket=bucket)
    settings = S3Settings(
        endpoint_url=reach_at or s3_endpoint,
        region="us-east-1",
        access_key_id="k",
        secret_access_key="s",
    )
    return Target.parse(f"s3://{bucket}/replica", settings)
