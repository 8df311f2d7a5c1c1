"""`storage.manifest_url` on a real PostgreSQL server: both ingest paths keep their promises
(offsets committed after the manifest, the manifest winning over Kafka's offsets, idempotent
producers answered once) with no SQLite file in the data folder."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import yaml
from confluent_kafka import Consumer, TopicPartition

from bridge.demo.producer import Record, produce
from plateau_core import Store
from tests.bridge_support import (
    committed,
    end_offsets,
    make_config,
    plateau_command,
    serving,
    stored,
    wait_landed,
)
from tests.kafka_api.support import api_config, listening
from tests.kafka_api.support import stored as api_stored
from tests.kafka_api.test_librdkafka import produce as produce_to_api
from tests.postgres_server import PostgresServer


def _produce(kafka: str, topic: str, start: int, count: int) -> None:
    # Both partitions get records: keyless ones stick to one partition per batch, and a
    # partition left empty has no sealed offset to commit.
    records = (Record(value=f"r{i}".encode(), partition=i % 2) for i in range(start, start + count))
    produce(kafka, topic, records)


def test_the_consumer_path_commits_after_a_postgresql_manifest(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, postgres: PostgresServer
) -> None:
    topic = topic_factory(partitions=2)
    group = f"g-{topic}"
    url = postgres.new_database()
    data = tmp_path / "data"
    config = make_config(
        kafka, data, [{"source": topic}], group=group, storage={"manifest_url": url}
    )

    _produce(kafka, topic, 0, 1000)
    with serving(config):
        wait_landed(data, topic, end_offsets(kafka, topic), manifest_url=url)
    first = end_offsets(kafka, topic)
    assert committed(kafka, group, topic, 2) == first

    # Kafka's committed offsets set back to 0: the manifest on PostgreSQL still wins.
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in first], asynchronous=False)
    finally:
        consumer.close()
    _produce(kafka, topic, 1000, 500)
    with serving(config):
        wait_landed(data, topic, end_offsets(kafka, topic), manifest_url=url)

    table = stored(data, topic, manifest_url=url)
    assert Counter(table.column("value").to_pylist()) == Counter(
        f"r{i}".encode() for i in range(1500)
    )
    assert not list(data.glob("manifest.db*")), "a SQLite manifest was created beside it"

    config_file = tmp_path / "plateau.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": kafka, "group_id": group},
                "storage": {"data_dir": str(data), "manifest_url": url},
                "topics": [{"source": topic}],
            }
        )
    )
    status = plateau_command("status", "--config", str(config_file), "--json")
    assert status.returncode == 0, status.stderr[-2000:]
    assert topic in json.dumps(json.loads(status.stdout))


def test_idempotent_producers_on_a_postgresql_manifest(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    url = postgres.new_database()
    data = tmp_path / "store"
    config = api_config(data, manifest_url=url)
    settings = {"acks": "all", "enable.idempotence": True}
    with listening(config) as (_server, bootstrap):
        first = produce_to_api(bootstrap, "events", settings, count=1500)
    # A restart: producer state and offsets come back from PostgreSQL.
    with listening(config) as (_server, bootstrap):
        second = produce_to_api(bootstrap, "events", settings, count=1500)
    delivered = first + second
    assert Counter(api_stored(data, "events", manifest_url=url).column("value").to_pylist()) == (
        Counter(m.value() for m in delivered)
    )
    with Store.open(data, manifest_url=url) as store:
        assert store.manifest.engine.dialect.name == "postgresql"
        # Each partition's offsets run on across the restart, each acknowledged one once.
        for partition in (0, 1):
            acknowledged = sorted(m.offset() for m in delivered if m.partition() == partition)
            assert acknowledged == list(range(len(acknowledged)))
            landed = store.read("events", partitions=[partition]).to_table()
            assert sorted(landed.column("offset").to_pylist()) == acknowledged
    assert not list(data.glob("manifest.db*"))
