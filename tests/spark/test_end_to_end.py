"""Kafka → plateau serve → Spark: what was produced is what Spark reads and replicates."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from bridge.demo.producer import Record, produce
from plateau_core import Store
from plateau_spark.replication import Replicator, Target
from tests.bridge_support import end_offsets, make_config, serving, wait_landed

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
