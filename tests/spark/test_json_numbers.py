"""A json topic whose field was an integer in older segments and a double in newer ones (an
inferred field that met a fraction): every reader and both replica formats, the replicas
migrated to the double (failures during that migration: test_replica_widening.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from pyarrow import fs
from pyspark.sql import SparkSession
from pyspark.sql.types import ArrayType, DoubleType
from structlog.testing import capture_logs

from bridge.cli import main
from bridge.config import TopicMapping
from bridge.consume.messages import records_of
from bridge.ingest.decode import decoder_for
from plateau_core import SegmentState, Store
from plateau_core.schema_merge import merged_schema
from plateau_spark.iceberg_read import iceberg_frame
from plateau_spark.replicate import replicate
from plateau_spark.replication import Replicator, Target
from plateau_spark.replication.iceberg_commit import committed_offsets
from tests.spark.conftest import s3_bucket_target, write_segments
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


def land(
    store: Store, topic: str, records: list[dict[str, object]], offset: int, partition: int = 0
) -> None:
    """One poll of json records decoded as a worker started now decodes them (seeded with
    the topic's stored columns) and sealed as one segment of `partition`."""
    decoder = decoder_for(TopicMapping(source=topic, format="json"))
    stored = store.manifest.schemas(topic)
    if stored:
        decoder.seed(merged_schema(stored.values()).settled())
    messages = [
        Message(
            topic=topic,
            partition=partition,
            offset=offset + i,
            value=json.dumps(r).encode(),
            timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + offset + i),
        )
        for i, r in enumerate(records)
    ]
    decoded = decoder.decode(records_of(messages))
    assert decoded.poison == []
    write_segments(store, topic, partition, decoded.batches, roll_rows=len(records))


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


def lifecycle(event: dict[str, Any]) -> tuple[object, ...]:
    """What a log line says of the rows it is about."""
    return (event["topic"], event["partition"], event["first_offset"], event["last_offset"])


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


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_parquet_replica_copied_before_and_after_the_widening_reads_as_one_table(
    spark: SparkSession, tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """A run before the change wrote the column as bigint. The run after it rewrites that
    file as double (same name, same rows) before writing its own, so Spark reads the folder
    as one table, with mergeSchema and without (before, it refused both ways)."""
    store = Store.open(tmp_path / "data")
    if where == "local":
        target = Target.parse(str(tmp_path / "replica"))
        runner: SparkSession | None = spark  # Spark's writer; pyarrow's on S3: both rewritten
    else:
        target = s3_bucket_target(request.getfixturevalue("s3_endpoint"))
        runner = None
    job = Replicator(store, target)
    land(store, "j", WHOLE, 0)
    assert job.run_once(runner).files_migrated == 0
    land(store, "j", FRACTIONS, 2)
    with capture_logs() as logged:
        (report,) = replicate(job, runner, interval_s=0, once=True)
    assert report.files_migrated == 1 and report.files == 1
    (run,) = [e for e in logged if e["event"] == "replication_run"]
    assert run["files_migrated"] == 1
    migrated = [e for e in logged if e["event"] == "replica_file_migrated"]
    assert [
        (e["topic"], e["partition"], e["first_offset"], e["last_offset"]) for e in migrated
    ] == [("j", 0, 0, 1)]
    assert migrated[0]["columns"]["latency"] == "int64 -> double"
    assert {s.state for s in store.manifest.segments("j")} == {SegmentState.REPLICATED}

    folder = tmp_path / "replica" / "j"
    if where == "s3":
        fs.copy_files(target.path("j"), str(folder), source_filesystem=target.filesystem())
    files = sorted(folder.rglob("*.parquet"))
    assert [str(ds.dataset(f).schema.field("latency").type) for f in files] == ["double"] * 2
    for merge in ("true", "false"):
        df = spark.read.option("mergeSchema", merge).parquet(str(folder))
        assert df.schema["latency"].dataType == DoubleType()
        assert df.schema["l"].dataType == ArrayType(DoubleType())
        got = df.orderBy("offset").select("offset", "latency", "o.ms", "l").collect()
        assert [tuple(r) for r in got] == ROWS

    # Later runs find the replica of the store's types: nothing is rewritten again.
    land(store, "j", WHOLE, 4)
    assert job.run_once(runner).files_migrated == 0
    store.close()


def test_an_iceberg_table_created_before_the_widening_replaces_the_column(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Iceberg cannot change long to double in place: the run replaces each such column by
    a new one of the same name (a new field id, in the same place) and rewrites the data
    files holding it, in one commit carrying the offsets and the store id forward, then
    appends the new rows. Every row is in the table once, as a double."""
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    land(store, "j", WHOLE, 0)
    job.run_once()
    table = job.table("j")
    assert str(table.schema().find_field("latency").field_type) == "long"
    columns = table.schema().column_names
    old_id = table.schema().find_field("latency").field_id
    (old_file,) = data_files(table)
    land(store, "j", FRACTIONS, 2)
    land(store, "k", WHOLE, 0)
    with capture_logs() as logged:
        report = job.run_once()
    assert report.files_migrated == 1 and report.segments == 2
    table.refresh()
    schema = table.schema()
    assert schema.column_names == columns
    assert str(schema.find_field("latency").field_type) == "double"
    assert schema.find_field("latency").field_id != old_id
    assert str(schema.find_field("o").field_type) == "struct<17: ms: optional double>"
    assert str(schema.find_field("l").field_type) == "list<double>"
    assert rows_of(table.scan().to_arrow()) == ROWS
    assert table_keys(table) == {(0, o): 1 for o in range(4)}
    assert committed_offsets(table) == {0: 4}
    # The old file replaced by its rewritten copy, whose name says the same offsets.
    rewritten = [f for f in data_files(table) if f != old_file and f.startswith(old_file[:-8])]
    assert len(rewritten) == 1 and old_file not in data_files(table)

    current = table.current_snapshot()
    assert current is not None and current.parent_snapshot_id is not None
    change = table.snapshot_by_id(current.parent_snapshot_id)
    assert change is not None and change.summary is not None
    assert change.summary.operation.value == "overwrite"
    properties = change.summary.additional_properties
    assert properties["plateau.offsets"] == '{"0": 2}'
    assert properties["plateau.store-id"] == store.manifest.store_id()
    assert properties["plateau.operation"] == "replace-columns"
    replaced = [e for e in logged if e["event"] == "iceberg_columns_replaced"]
    assert replaced[0]["columns"]["latency"] == "long -> double"
    moved = [e for e in logged if e["event"] == "iceberg_file_migrated"]
    assert [lifecycle(e) for e in moved] == [("j", 0, 0, 1)]

    frame = iceberg_frame(spark, table)
    assert frame.schema["latency"].dataType == DoubleType()
    got = frame.orderBy("offset").select("offset", "latency", "o.ms", "l").collect()
    assert [tuple(r) for r in got] == ROWS
    assert {s.state for s in store.manifest.segments("j")} == {SegmentState.REPLICATED}
    assert table_keys(job.table("k")) == {(0, 0): 1, (0, 1): 1}
    store.close()


def test_an_iceberg_table_created_after_the_widening_holds_doubles(tmp_path: Path) -> None:
    store = widened_store(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    job.run_once()
    table = job.table("j")
    assert str(table.schema().find_field("latency").field_type) == "double"
    assert rows_of(table.scan().to_arrow()) == ROWS
    store.close()
