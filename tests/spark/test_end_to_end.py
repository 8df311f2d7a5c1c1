"""Kafka → plateau serve → Spark: what was produced is what Spark reads and replicates."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as fn

from bridge.demo.producer import Record, produce
from plateau_core import Store
from plateau_spark.replication import Replicator, Target
from tests.bridge_support import end_offsets, make_config, serving, wait_landed
from tests.kafka_api.support import api_config, listening

BASE_MS = 1_760_000_000_000


def test_produced_json_is_queried_and_replicated(
    kafka: str, topic_factory: Callable[..., str], spark: SparkSession, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    records = [
        Record(
            value=json.dumps({"user": f"u{i % 17}", "n": i, "ok": i % 3 == 0}).encode(),
            key=f"k{i}".encode(),
            timestamp_ms=BASE_MS + i,
        )
        for i in range(4000)
    ]
    assert produce(kafka, topic, records) == 4000
    data_dir = tmp_path / "data"
    config = make_config(kafka, data_dir, [{"source": topic, "format": "json"}], group=f"g-{topic}")
    with serving(config):
        wait_landed(data_dir, topic, end_offsets(kafka, topic))

    df = spark.read.format("plateau").option("path", str(data_dir)).option("topic", topic).load()
    assert df.count() == 4000
    assert df.select("partition", "offset").distinct().count() == 4000
    by_user = {r.user: r[1] for r in df.groupBy("user").count().collect()}
    assert by_user == {f"u{u}": len(range(u, 4000, 17)) for u in range(17)}
    assert sorted(r.n for r in df.filter("n >= 3990").select("n").collect()) == list(
        range(3990, 4000)
    )

    with Store.open(data_dir) as store:
        report = Replicator(store, Target.parse(str(tmp_path / "replica"))).run_once(spark)
    assert report.rows == 4000
    copy = spark.read.parquet(str(tmp_path / "replica" / topic))
    assert copy.count() == 4000
    assert copy.agg({"n": "sum"}).first()[0] == sum(range(4000))


def test_fields_named_like_plateaus_columns_in_any_case_are_queried_and_replicated(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark resolves names ignoring case: a json field `Timestamp` stored as is made every
    reference to `timestamp` ambiguous ([AMBIGUOUS_REFERENCE]), and one named `partition`
    made the connector refuse the topic."""
    data_dir = tmp_path / "data"
    config = api_config(data_dir, [{"name": "named", "partitions": 2, "format": "json"}])
    values = [
        json.dumps({"Timestamp": i, "Partition": i % 3, "KEY": f"k{i}", "n": i}).encode()
        for i in range(300)
    ]
    with listening(config) as (_, bootstrap):
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i, value in enumerate(values):
            producer.produce("named", value, partition=i % 2, timestamp=BASE_MS + i)
        assert producer.flush(60) == 0

    df = spark.read.format("plateau").option("path", str(data_dir)).option("topic", "named").load()
    late = df.filter(fn.col("timestamp") >= fn.timestamp_millis(fn.lit(BASE_MS + 200)))
    assert sorted(r.n for r in late.select("n").collect()) == list(range(200, 300))
    by_partition = {r.partition: r[1] for r in df.groupBy("partition").count().collect()}
    assert by_partition == {0: 150, 1: 150}
    assert df.filter("Partition_ = 2").count() == 100
    assert df.agg(fn.sum("Timestamp_")).first()[0] == sum(range(300))

    with Store.open(data_dir) as store:
        report = Replicator(store, Target.parse(str(tmp_path / "replica"))).run_once(spark)
    assert report.rows == 300
    copy = spark.read.parquet(str(tmp_path / "replica" / "named"))
    assert copy.filter("partition = 1").count() == 150
    assert copy.agg(fn.sum("n")).first()[0] == sum(range(300))
