"""A data column stored as timestamps of different zones (or none) and units in different
segments: the store's reader, the connector and the replicas read one timestamp column."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as fn

from plateau_core import Store
from plateau_spark.replication import Replicator, Target
from plateau_spark.replication.micros import micros_type
from tests.spark.conftest import write_segments
from tests.spark.iceberg_support import replicator
from tests.spark.test_source import load
from tests.support import batch

US = 1_700_000_000_123_456  # 2023-11-14T22:13:20.123456Z in microseconds


def _struct(unit: str, tz: str | None, values: list[int | None]) -> pa.Array:
    kind = pa.struct([("at", pa.timestamp(unit, tz=tz)), ("n", pa.int64())])
    return pa.array([None if v is None else {"at": v, "n": 1} for v in values], kind)


# Per case: the column as each segment stores it, and the type every reader gives it.
CASES: dict[str, tuple[list[pa.Array], pa.DataType]] = {
    "naive and UTC": (
        [
            pa.array([US, 0, None], pa.timestamp("us")),
            pa.array([US // 1000, -1], pa.timestamp("ms", tz="UTC")),
        ],
        pa.timestamp("us", tz="UTC"),
    ),
    "two other zones": (
        [
            pa.array([US // 1000, None], pa.timestamp("ms", tz="Europe/Paris")),
            pa.array([US // 10**6, 0], pa.timestamp("s", tz="+05:30")),
        ],
        pa.timestamp("ms", tz="UTC"),
    ),
    "zoned, naive and nanoseconds": (
        [
            pa.array([US * 1000 + 789], pa.timestamp("ns", tz="America/New_York")),
            pa.array([US // 10**6], pa.timestamp("s")),
        ],
        pa.timestamp("us", tz="UTC"),
    ),
    "seconds in the year 3000 and nanoseconds": (
        [
            pa.array([32_503_680_000, None], pa.timestamp("s", tz="UTC")),
            pa.array([US * 1000 + 789, -1500], pa.timestamp("ns", tz="UTC")),
        ],
        pa.timestamp("us", tz="UTC"),
    ),
    "inside a struct": (
        [_struct("ms", None, [US // 1000, None]), _struct("us", "UTC", [US, 5])],
        pa.struct([("at", pa.timestamp("us", tz="UTC")), ("n", pa.int64())]),
    ),
    "inside a list": (
        [
            pa.array([[US // 1000, None], []], pa.list_(pa.timestamp("ms"))),
            pa.array([[US], None], pa.list_(pa.timestamp("us", tz="Asia/Tokyo"))),
        ],
        pa.list_(pa.timestamp("us", tz="UTC")),
    ),
    "inside a map": (
        [
            pa.array([[("a", US)], None], pa.map_(pa.string(), pa.timestamp("us"))),
            pa.array([[("b", US // 1000)]], pa.map_(pa.string(), pa.timestamp("ms", tz="UTC"))),
        ],
        pa.map_(pa.string(), pa.timestamp("us", tz="UTC")),
    ),
}


def _topic(store: Store, columns: list[pa.Array]) -> None:
    """One segment per column, each in its own partition."""
    for partition, column in enumerate(columns):
        data = batch(range(len(column)), extra={"at": column})
        write_segments(store, "t", partition, [data], roll_rows=len(column))


def _store_rows(store: Store, partitions: int) -> pa.Table:
    """The store's rows as (partition, offset, at), in that order."""
    tables = []
    for p in range(partitions):
        read = store.read("t", partitions=[p], columns=["offset", "at"]).to_table()
        tables.append(read.add_column(0, "partition", pa.array([p] * read.num_rows, pa.int32())))
    return pa.concat_tables(tables)


@pytest.mark.parametrize("case", list(CASES))
def test_the_store_and_the_connector_read_one_timestamp_column(
    spark: SparkSession, tmp_path: Path, case: str
) -> None:
    """Stored naive in one segment and with a zone in another, the column read as JSON text
    in the store's reader (a clash of types) but as a timestamp in the connector. Both read
    it as a timestamp in UTC, naive values taken as UTC, in the finest unit stored (Spark's
    microseconds in the connector), in a column as inside a struct, list or map."""
    columns, merged = CASES[case]
    store = Store.open(tmp_path / "data")
    _topic(store, columns)
    stored = _store_rows(store, len(columns))
    assert stored.schema.field("at").type == merged
    frame = load(spark, store, "t").select("partition", "offset", "at")
    spark_rows = frame.orderBy("partition", "offset").toArrow()
    want = stored.column("at").cast(spark_rows.schema.field("at").type, safe=False)
    assert spark_rows.column("at").to_pylist() == want.to_pylist()
    assert spark_rows.column("offset").to_pylist() == stored.column("offset").to_pylist()
    store.close()


def _stamps(dtype: pa.DataType) -> list[tuple[str, str | None]]:
    """(unit, zone) of every timestamp in `dtype`, in a column as inside a struct, list or
    map, in order."""
    t = pa.types
    if t.is_timestamp(dtype):
        return [(dtype.unit, dtype.tz)]
    if t.is_struct(dtype):
        return [s for f in dtype for s in _stamps(f.type)]
    if t.is_map(dtype):
        return _stamps(dtype.key_type) + _stamps(dtype.item_type)
    if t.is_list(dtype) or t.is_large_list(dtype):
        return _stamps(dtype.value_type)
    return []


def _as_spark_holds(dtype: pa.DataType) -> list[tuple[str, str | None]]:
    """The timestamps of `dtype` as Spark holds them: microseconds, UTC or no zone."""
    return [("us", None if tz is None else "UTC") for _, tz in _stamps(dtype)]


def _same_values(stored: pa.Table, replica: pa.Table) -> None:
    """The replica's `at` holds the store's, in the replica's unit (rounded toward zero:
    the values are after 1970, where that is flooring, as Spark reads)."""
    replica = replica.sort_by([("partition", "ascending"), ("offset", "ascending")])
    held = replica.schema.field("at").type
    assert replica.column("offset").to_pylist() == stored.column("offset").to_pylist()
    want = stored.column("at").cast(held, safe=False).to_pylist()
    assert replica.column("at").to_pylist() == want


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("writer", ["pyarrow", "spark"])
def test_a_parquet_replica_holds_what_the_store_reads(
    spark: SparkSession, tmp_path: Path, case: str, writer: str
) -> None:
    """The column was JSON text in files pyarrow wrote, timestamps in those Spark wrote.
    Both hold the store's timestamps (nanoseconds in microseconds), and Spark reads both."""
    columns, merged = CASES[case]
    store = Store.open(tmp_path / "data")
    _topic(store, columns)
    target = tmp_path / "replica"
    Replicator(store, Target.parse(str(target))).run_once(spark if writer == "spark" else None)
    replica = ds.dataset(str(target / "t"), partitioning="hive").to_table()
    held = replica.schema.field("at").type
    if writer == "spark":
        assert _stamps(held) == _as_spark_holds(merged)
    else:
        assert _stamps(held) == _stamps(micros_type(merged))
    _same_values(_store_rows(store, len(columns)), replica)
    assert spark.read.parquet(str(target / "t")).count() == replica.num_rows
    store.close()


@pytest.mark.parametrize("case", list(CASES))
def test_an_iceberg_replica_holds_what_the_store_reads(tmp_path: Path, case: str) -> None:
    """The column was JSON text in the table: it is a timestamptz column (or a timestamp
    one, without zones) holding the store's values, as Spark reads it through the connector."""
    columns, merged = CASES[case]
    store = Store.open(tmp_path / "data")
    _topic(store, columns)
    job = replicator(store, tmp_path / "warehouse")
    job.run_once()
    replica = job.table("t").scan().to_arrow()
    assert _stamps(replica.schema.field("at").type) == _as_spark_holds(merged)
    _same_values(_store_rows(store, len(columns)), replica)
    store.close()


@pytest.mark.parametrize("writer", ["pyarrow", "spark", "iceberg"])
def test_nanoseconds_replicate_in_microseconds_floored_as_the_connector_reads_them(
    spark: SparkSession, tmp_path: Path, writer: str
) -> None:
    """pyarrow wrote a nanosecond column into the Parquet replica as such, which Spark's
    Parquet reader refuses (PARQUET_TYPE_ILLEGAL), and every Iceberg run failed on a value
    below the microsecond (a checked cast to the table's microseconds). Both hold them in
    microseconds, floored as the connector reads them (before 1970 too)."""
    store = Store.open(tmp_path / "data")
    stored = pa.array([US * 1000 + 789, -1500, None], pa.timestamp("ns", tz="UTC"))
    _topic(store, [stored])
    if writer == "iceberg":
        job = replicator(store, tmp_path / "warehouse")
        job.run_once()
        replica = job.table("t").scan().to_arrow()
    else:
        target = tmp_path / "replica"
        Replicator(store, Target.parse(str(target))).run_once(spark if writer == "spark" else None)
        replica = ds.dataset(str(target / "t"), partitioning="hive").to_table()
        assert spark.read.parquet(str(target / "t")).count() == 3
    replica = replica.sort_by("offset")
    assert replica.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert replica.column("at").cast(pa.int64()).to_pylist() == [US, -2, None]
    store.close()


@pytest.mark.parametrize("pushdown", ["true", "false"])
def test_a_filter_on_the_column_finds_the_same_rows_in_both_readers(
    spark: SparkSession, tmp_path: Path, pushdown: str
) -> None:
    """An equality on the instant finds the rows of every segment holding it, whatever
    unit and zone each stores: `where` compared as each segment stored the column, and
    refused text with a zone in the naive segment."""
    store = Store.open(tmp_path / "data")
    ms = US // 1000
    _topic(
        store,
        [
            pa.array([ms * 1000, ms * 1000 + 1], pa.timestamp("us")),
            pa.array([ms - 1, ms], pa.timestamp("ms", tz="Europe/Paris")),
            pa.array([ms // 1000], pa.timestamp("s", tz="UTC")),
        ],
    )
    instant = datetime.fromtimestamp(ms / 1000, UTC)
    mine = [
        (p, o)
        for p in range(3)
        for o in store.read("t", partitions=[p], where={"at": instant.isoformat()})
        .to_table()
        .column("offset")
        .to_pylist()
    ]
    assert mine == [(0, 0), (1, 1)]
    frame = load(spark, store, "t", pushdown=pushdown)
    found = frame.where(fn.col("at") == fn.lit(instant)).select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in found) == mine
    store.close()


def test_a_timestamp_beyond_microseconds_fails_both_readers_instead_of_wrapping(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Seconds past the year 294247 do not fit Spark's microseconds: multiplied in a long,
    the connector wrapped them round into another instant, with nothing said."""
    beyond = 10**13  # seconds: the year 318857
    store = Store.open(tmp_path / "data")
    _topic(store, [pa.array([0, beyond], pa.timestamp("s", tz="UTC"))])
    with pytest.raises(Exception, match="beyond the microseconds"):
        load(spark, store, "t").select("at").collect()
    assert load(spark, store, "t").select("offset").count() == 2  # other columns read
    store.close()
