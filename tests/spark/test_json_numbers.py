"""A json topic whose field was an integer in older segments and a double in newer ones (an
inferred field that met a fraction): every reader and both replica formats."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from pyspark.sql import SparkSession
from pyspark.sql.types import ArrayType, DoubleType
from structlog.testing import capture_logs

from bridge.cli import main
from bridge.config import TopicMapping
from bridge.consume.messages import records_of
from bridge.ingest.decode import decoder_for
from plateau_core import SegmentState, Store
from plateau_core.schema import merged_schema
from plateau_spark.replication import IcebergSettings, Replicator, SchemaConflictError, Target
from plateau_spark.replication.iceberg_commit import committed_offsets
from tests.spark.conftest import write_segments
from tests.spark.iceberg_support import data_files, replicator, table_keys
from tests.spark.test_source import load

WHOLE = [
    {"user": "ann", "latency": 12, "o": {"ms": 3}, "l": [1, 2]},
    {"user": "bob", "latency": 7, "o": {"ms": 4}, "l": [3]},
]
FRACTIONS = [
    {"user": "cy", "latency": 12.5, "o": {"ms": 0.5}, "l": [2.5]},
    {"user": "ann", "latency": 1, "o": {"ms": 1}, "l": [4]},
]
# What every reader gives for offsets 0-3: the integers of the older segment as doubles.
ROWS = [
    (0, 12.0, 3.0, [1.0, 2.0]),
    (1, 7.0, 4.0, [3.0]),
    (2, 12.5, 0.5, [2.5]),
    (3, 1.0, 1.0, [4.0]),
]


def land(store: Store, topic: str, records: list[dict[str, object]], offset: int) -> None:
    """One poll of json records decoded as a worker started now decodes them (seeded with
    the topic's stored columns) and sealed as one segment of partition 0."""
    decoder = decoder_for(TopicMapping(source=topic, format="json"))
    stored = store.manifest.schemas(topic)
    if stored:
        decoder.seed(merged_schema(stored.values()).settled())
    messages = [
        Message(
            topic=topic,
            partition=0,
            offset=offset + i,
            value=json.dumps(r).encode(),
            timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + offset + i),
        )
        for i, r in enumerate(records)
    ]
    decoded = decoder.decode(records_of(messages))
    assert decoded.poison == []
    write_segments(store, topic, 0, decoded.batches, roll_rows=len(records))


def widened_store(path: Path, topic: str = "j") -> Store:
    store = Store.open(path)
    land(store, topic, WHOLE, 0)
    land(store, topic, FRACTIONS, 2)
    types = {str(s.field("latency").type) for s in store.manifest.schemas(topic).values()}
    assert types == {"int64", "double"}
    return store


def rows_of(table: pa.Table) -> list[tuple[object, ...]]:
    picked = table.sort_by("offset").select(["offset", "latency", "o", "l"]).to_pylist()
    return [(r["offset"], r["latency"], r["o"]["ms"], r["l"]) for r in picked]


def test_store_read_spark_and_plateau_query_read_the_column_as_double(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = widened_store(tmp_path / "data")
    table = store.read("j").to_table()
    assert table.schema.field("latency").type == pa.float64()
    assert rows_of(table) == ROWS

    df = load(spark, store, "j")
    assert df.schema["latency"].dataType == DoubleType()
    assert df.schema["l"].dataType == ArrayType(DoubleType())
    assert df.schema["user"].dataType.simpleString() == "string"
    got = df.orderBy("offset").select("offset", "latency", "o.ms", "l").collect()
    assert [tuple(r) for r in got] == ROWS
    assert df.filter("latency > 12").select("offset").collect()[0][0] == 2

    config = tmp_path / "plateau.yaml"
    config.write_text("storage:\n  data_dir: data\ntopics:\n  - source: j\n")
    capsys.readouterr()
    sql = "SELECT sum(latency) AS s, max(o.ms) AS m, count(*) AS n FROM j"
    assert main(["query", "-c", str(config), sql, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"s": 32.5, "m": 4.0, "n": 4}
    store.close()


def test_a_parquet_replica_copied_before_and_after_the_widening_holds_every_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A run before the change writes the column as bigint, one after it as double: both
    kinds of file sit in the replica, every row once. Spark's Parquet reader does not merge
    bigint files with double ones; a reader given the newest file's schema reads them all."""
    store = Store.open(tmp_path / "data")
    replica = tmp_path / "replica"
    job = Replicator(store, Target.parse(str(replica)))
    land(store, "j", WHOLE, 0)
    job.run_once(spark)
    land(store, "j", FRACTIONS, 2)
    job.run_once(spark)
    assert {s.state for s in store.manifest.segments("j")} == {SegmentState.REPLICATED}
    files = sorted((replica / "j").rglob("*.parquet"))
    kinds = [str(ds.dataset(f).schema.field("latency").type) for f in files]
    assert kinds == ["int64", "double"]
    newest = ds.dataset(files[-1]).schema
    assert rows_of(ds.dataset(files, schema=newest).to_table()) == ROWS
    with pytest.raises(Exception, match="CANNOT_MERGE_INCOMPATIBLE_DATA_TYPE"):
        spark.read.option("mergeSchema", "true").parquet(str(replica / "j"))
    store.close()


def test_an_iceberg_table_created_before_the_widening_refuses_it_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """Iceberg cannot change long to double: the run names the topic and every such column,
    writes and records nothing of that topic (its segments wait, sealed), and replicates the
    topics after it, which it stopped before."""
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    land(store, "j", WHOLE, 0)
    job.run_once()
    table = job.table("j")
    assert str(table.schema().find_field("latency").field_type) == "long"
    files = data_files(table)
    land(store, "j", FRACTIONS, 2)
    land(store, "k", WHOLE, 0)
    with capture_logs() as logged, pytest.raises(SchemaConflictError) as refused:
        job.run_once()
    assert [e["topic"] for e in logged if e["event"] == "iceberg_schema_conflict"] == ["j"]
    message = str(refused.value)
    assert message.startswith("topic 'j': field 'latency' is double in the store but int64")
    assert "field 'o' is struct<ms: double>" in message and "field 'l' is list" in message
    assert "replication.iceberg.namespace" in message
    table.refresh()
    assert committed_offsets(table) == {0: 2} and data_files(table) == files
    assert rows_of(table.scan().to_arrow()) == [(0, 12, 3, [1, 2]), (1, 7, 4, [3])]
    states = {s.start_offset: s.state for s in store.manifest.segments("j")}
    assert states == {0: SegmentState.REPLICATED, 2: SegmentState.SEALED}
    assert {s.state for s in store.manifest.segments("k")} == {SegmentState.REPLICATED}
    assert table_keys(job.table("k")) == {(0, 0): 1, (0, 1): 1}
    # Another namespace takes the rows the first table could not, as doubles.
    elsewhere = replicator(
        store, tmp_path / "warehouse", settings=IcebergSettings(namespace="widened")
    )
    elsewhere.run_once()
    assert rows_of(elsewhere.table("j").scan().to_arrow()) == ROWS[2:]
    assert {s.state for s in store.manifest.segments("j")} == {SegmentState.REPLICATED}
    store.close()


def test_an_iceberg_table_created_after_the_widening_holds_doubles(tmp_path: Path) -> None:
    store = widened_store(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    job.run_once()
    table = job.table("j")
    assert str(table.schema().find_field("latency").field_type) == "double"
    assert rows_of(table.scan().to_arrow()) == ROWS
    store.close()
