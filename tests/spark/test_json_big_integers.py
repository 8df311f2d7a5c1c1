"""A json topic whose field was an integer in older segments and a decimal(38, 0) in newer
ones (an inferred field that met an integer beyond int64, a uint64 id): every reader and
both replica formats give the same exact values, the replicas migrated to the decimal."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, DecimalType, DoubleType
from structlog.testing import capture_logs

from plateau_core import Store
from plateau_spark.iceberg_read import iceberg_frame
from plateau_spark.replication import Replicator, Target
from tests.spark.iceberg_support import replicator
from tests.spark.test_json_numbers import land
from tests.spark.test_source import load

UINT64_MAX = 2**64 - 1
WHOLE = [
    {"user": "ann", "id": 12, "o": {"ref": 3}, "l": [1, 2]},
    {"user": "bob", "id": 7, "o": {"ref": 4}, "l": [3]},
]
BEYOND = [
    {"user": "cy", "id": UINT64_MAX, "o": {"ref": 2**63 + 1}, "l": [-UINT64_MAX]},
    {"user": "ann", "id": 1, "o": {"ref": 1}, "l": [4]},
]
ROWS = [
    (0, Decimal(12), Decimal(3), [Decimal(1), Decimal(2)]),
    (1, Decimal(7), Decimal(4), [Decimal(3)]),
    (2, Decimal(UINT64_MAX), Decimal(2**63 + 1), [Decimal(-UINT64_MAX)]),
    (3, Decimal(1), Decimal(1), [Decimal(4)]),
]
DECIMAL = DecimalType(38, 0)


def rows_of(table: pa.Table) -> list[tuple[object, ...]]:
    picked = table.sort_by("offset").select(["offset", "id", "o", "l"]).to_pylist()
    return [(r["offset"], r["id"], r["o"]["ref"], r["l"]) for r in picked]


def spark_rows(frame: DataFrame) -> list[tuple[object, ...]]:
    got = frame.orderBy("offset").select("offset", "id", "o.ref", "l").collect()
    return [tuple(r) for r in got]


def widened_store(path: Path) -> Store:
    store = Store.open(path)
    land(store, "j", WHOLE, 0)
    land(store, "j", BEYOND, 2)
    types = {str(s.field("id").type) for s in store.manifest.schemas("j").values()}
    assert types == {"int64", "decimal128(38, 0)"}
    return store


def test_store_read_and_spark_read_every_digit(spark: SparkSession, tmp_path: Path) -> None:
    store = widened_store(tmp_path / "data")
    table = store.read("j").to_table()
    assert table.schema.field("id").type == pa.decimal128(38, 0)
    assert rows_of(table) == ROWS

    df = load(spark, store, "j")
    assert df.schema["id"].dataType == DECIMAL
    assert df.schema["l"].dataType == ArrayType(DECIMAL)
    assert spark_rows(df) == ROWS
    assert df.filter(f"id = {UINT64_MAX}").select("offset").collect()[0][0] == 2

    # A fraction after that: the column reads as double everywhere.
    land(store, "j", [{"user": "dee", "id": 0.5, "o": {"ref": 0.5}, "l": [0.5]}], 4)
    assert store.read("j").to_table().schema.field("id").type == pa.float64()
    df = load(spark, store, "j")
    assert df.schema["id"].dataType == DoubleType()
    assert df.schema["l"].dataType == ArrayType(DoubleType())
    assert spark_rows(df)[4] == (4, 0.5, 0.5, [0.5])
    assert spark_rows(df)[0] == (0, 12.0, 3.0, [1.0, 2.0])
    store.close()


def test_a_parquet_replica_copied_before_the_change_is_migrated_to_the_decimal(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "data")
    job = Replicator(store, Target.parse(str(tmp_path / "replica")))
    land(store, "j", WHOLE, 0)
    assert job.run_once(spark).files_migrated == 0
    land(store, "j", BEYOND, 2)
    with capture_logs() as logged:
        assert job.run_once(spark).files_migrated == 1
    migrated = [e for e in logged if e["event"] == "replica_file_migrated"]
    assert migrated[0]["columns"]["id"] == "int64 -> decimal128(38, 0)"
    files = sorted((tmp_path / "replica" / "j").rglob("*.parquet"))
    assert [str(ds.dataset(f).schema.field("id").type) for f in files] == ["decimal128(38, 0)"] * 2
    for merge in ("true", "false"):
        df = spark.read.option("mergeSchema", merge).parquet(str(tmp_path / "replica" / "j"))
        assert df.schema["id"].dataType == DECIMAL
        assert spark_rows(df) == ROWS
    store.close()


def test_an_iceberg_table_created_before_the_change_replaces_the_column(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Iceberg has no long to decimal promotion: the column is replaced and its files
    rewritten in one commit, as for long to double."""
    store = Store.open(tmp_path / "data")
    job = replicator(store, tmp_path / "warehouse")
    land(store, "j", WHOLE, 0)
    job.run_once()
    table = job.table("j")
    assert str(table.schema().find_field("id").field_type) == "long"
    land(store, "j", BEYOND, 2)
    with capture_logs() as logged:
        report = job.run_once()
    assert report.files_migrated == 1
    replaced = [e for e in logged if e["event"] == "iceberg_columns_replaced"]
    assert replaced[0]["columns"]["id"] == "long -> decimal128(38, 0)"
    table.refresh()
    assert str(table.schema().find_field("id").field_type) == "decimal(38, 0)"
    assert rows_of(table.scan().to_arrow()) == ROWS
    frame = iceberg_frame(spark, table)
    assert frame.schema["id"].dataType == DECIMAL
    assert spark_rows(frame) == ROWS
    store.close()
