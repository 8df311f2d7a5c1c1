"""Clients nobody here wrote, with their defaults: kcat (librdkafka) and Apache Kafka's own
console producer and producer perf test (the Java client: acks=all, idempotence on), each
followed by reading the store back."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bridge.local_kafka.jars import kafka_libs
from tests.kafka_api.support import api_config, listening, stored

pytestmark = pytest.mark.integration

LINES = [f"key-{i}:value-{i}" for i in range(500)]


def kcat() -> str:
    found = shutil.which("kcat") or shutil.which("kafkacat")
    if found is None:
        pytest.fail("kcat is not installed (make test installs it: apt-get install kcat)")
    return found


def java_tool(main: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["java", "-Xmx256m", "-cp", f"{kafka_libs()}/*", main, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_kcat_producer(tmp_path: Path) -> None:
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        done = subprocess.run(
            [
                kcat(),
                "-P",
                "-b",
                bootstrap,
                "-t",
                "events",
                "-K:",
                "-H",
                "source=kcat",
                "-X",
                "acks=all",
            ],
            input="\n".join(LINES) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    rows = stored(tmp_path / "store", "events").to_pylist()
    assert sorted(f"{r['key'].decode()}:{r['value'].decode()}" for r in rows) == sorted(LINES)
    assert all(r["headers"] == [{"key": "source", "value": b"kcat"}] for r in rows)


def test_java_console_producer(tmp_path: Path) -> None:
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        done = java_tool(
            "org.apache.kafka.tools.ConsoleProducer",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            "events",
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
            stdin="\n".join(LINES) + "\n",
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = stored(tmp_path / "store", "events").to_pylist()
    assert sorted(f"{r['key'].decode()}:{r['value'].decode()}" for r in rows) == sorted(LINES)


def test_java_producer_perf_test(tmp_path: Path) -> None:
    records = 20_000
    with listening(api_config(tmp_path / "store")) as (server, bootstrap):
        done = java_tool(
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            "events",
            "--num-records",
            str(records),
            "--record-size",
            "128",
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert f"{records} records sent" in done.stdout
        # Idempotence is the Java client's default: its producer id came from plateau.
        assert server.stats.requests["InitProducerId"] >= 1
    table = stored(tmp_path / "store", "events")
    assert table.num_rows == records
    for partition_offsets in _offsets_by_partition(tmp_path / "store"):
        assert partition_offsets == list(range(len(partition_offsets)))


def _offsets_by_partition(data_dir: Path) -> list[list[int]]:
    from plateau_core import Store  # noqa: PLC0415

    with Store.open(data_dir) as store:
        return [
            store.read("events", partitions=[p]).to_table().column("offset").to_pylist()
            for p in (0, 1)
        ]


def test_kafka_admin_tools(tmp_path: Path) -> None:
    """What operations.md says Kafka's own tools do against the listener (the growth and
    offsets tools are in test_create_partitions and test_list_offsets)."""
    with listening(api_config(tmp_path / "store")) as (server, bootstrap):
        args = ("--bootstrap-server", bootstrap)
        listed = java_tool("org.apache.kafka.tools.TopicCommand", *args, "--list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split() == ["events"]
        configs = java_tool(
            "kafka.admin.ConfigCommand",
            *args,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            "events",
        )
        assert configs.returncode == 0, configs.stderr
        assert "message.timestamp.type=CreateTime" in configs.stdout
        cluster = java_tool("org.apache.kafka.tools.ClusterTool", "cluster-id", *args)
        assert cluster.returncode == 0, cluster.stderr
        assert server.requests is not None
        assert f"Cluster ID: {server.requests.admin.cluster_id}" in cluster.stdout
        versions = java_tool("org.apache.kafka.tools.BrokerApiVersionsCommand", *args)
        assert versions.returncode == 0, versions.stderr
        assert "Produce(0): 3 to 12" in versions.stdout
        assert "CreatePartitions(37): 0 to 3" in versions.stdout


def test_a_transactional_producer_fails_at_once_and_stores_nothing(tmp_path: Path) -> None:
    """A transactional.id makes the Java client ask for a transaction coordinator first,
    which plateau does not answer: the producer stops with that error instead of waiting
    for max.block.ms, and nothing lands."""
    with listening(api_config(tmp_path / "store")) as (server, bootstrap):
        done = java_tool(
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            "events",
            "--num-records",
            "100",
            "--record-size",
            "16",
            "--throughput",
            "-1",
            "--transactional-id",
            "tx-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
            "max.block.ms=120000",
        )
        assert done.returncode != 0
        assert "does not support FIND_COORDINATOR" in done.stderr, done.stderr[-2000:]
        assert server.stats.records["events"] == 0
    assert stored(tmp_path / "store", "events").num_rows == 0
