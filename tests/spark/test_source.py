"""The `plateau` data source against a real local SparkSession."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg2
import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn
from pyspark.sql.types import DecimalType, IntegerType, LongType, TimestampType

from plateau_core import Store
from plateau_core.schema import HEADERS_TYPE
from tests.postgres_server import PostgresServer
from tests.spark.conftest import MINUTE_MS, write_segments
from tests.support import BASE_MS, batch


def load(spark: SparkSession, store: Store, topic: str, **options: str) -> DataFrame:
    reader = spark.read.format("plateau").option("path", str(store.data_dir)).option("topic", topic)
    if not store.manifest.is_sqlite:
        reader = reader.option("manifest", store.manifest.url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def opened(trace: Path) -> list[str]:
    if not trace.exists():
        return []
    return sorted(json.loads(line)["segment"] for line in trace.read_text().splitlines())


def segment(partition: int, start: int, topic: str = "t") -> str:
    return f"topics/{topic}/{partition}/{start:020d}.arrow"


def at_minute(minute: int) -> datetime:
    return datetime.fromtimestamp((BASE_MS + minute * MINUTE_MS) / 1000, UTC)


@pytest.fixture
def evolving_store(tmp_path: Path) -> Store:
    """Topic `evo`: its schema grows and widens between segments, with nulls and headers."""
    store = Store.open(tmp_path / "evo")
    headers = pa.array([[{"key": "h", "value": b"\x00\xff"}], None, []] * 2, HEADERS_TYPE)
    first = batch(
        range(6),
        extra={
            "a": pa.array([1, None, 3, 4, 5, 6], pa.int32()),
            "b": pa.array(["x", "y", None, "z", "", "w"]),
            "u": pa.array([0, 1, 2, 3, 4, 2**64 - 1], pa.uint64()),
            "headers": headers,
        },
    )
    second = batch(
        range(6, 10),
        extra={
            "a": pa.array([2**40, None, -1, 0], pa.int64()),
            "c": pa.array([0.5, None, 1.5, -2.0]),
        },
    )
    write_segments(store, "evo", 0, [first], roll_rows=6)
    write_segments(store, "evo", 0, [second], roll_rows=4)
    write_segments(store, "evo", 3, [batch(range(100, 103))], roll_rows=3)
    return store


def test_rows_types_and_nulls_equal_plateau_reads(
    spark: SparkSession, evolving_store: Store
) -> None:
    df = load(spark, evolving_store, "evo")
    fields = {f.name: f.dataType for f in df.schema.fields}
    assert list(fields)[:3] == ["partition", "offset", "timestamp"]
    assert fields["partition"] == IntegerType()
    assert fields["a"] == LongType()  # int32 in the first segment, widened
    assert fields["u"] == DecimalType(20, 0)  # uint64 kept exact
    assert fields["timestamp"] == TimestampType()
    got = df.toArrow().sort_by([("partition", "ascending"), ("offset", "ascending")])
    for partition in (0, 3):
        expected = evolving_store.read("evo", partitions=[partition]).to_table()
        mine = got.filter(pa.compute.equal(got.column("partition"), partition))
        assert mine.num_rows == expected.num_rows
        for name in expected.column_names:
            want = expected.column(name).to_pylist()
            have = mine.column(name).to_pylist()
            if name == "u":
                have = [None if v is None else int(v) for v in have]
            assert have == want, name
    # Columns a segment did not have read as null, never as missing rows.
    late = got.filter(pa.compute.less(got.column("offset"), 6)).column("c")
    assert late.null_count == late.length() == 6


def test_filters_prune_segments_at_the_manifest(
    spark: SparkSession, minutes_store: Store, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    df = load(spark, minutes_store, "t", traceFile=str(trace))

    rows = df.filter("partition = 1 AND offset >= 250 AND offset < 420").collect()
    assert sorted(r.offset for r in rows) == list(range(250, 420))
    assert {r.partition for r in rows} == {1}
    assert opened(trace) == [segment(1, 200), segment(1, 300), segment(1, 400)]

    trace.unlink()
    in_minute_3 = df.filter(
        (fn.col("timestamp") >= at_minute(3)) & (fn.col("timestamp") < at_minute(4))
    )
    assert len(in_minute_3.select("value").collect()) == 300
    assert opened(trace) == [segment(p, 300) for p in range(3)]

    trace.unlink()
    # The filters cover whole segments, so count() is answered from the manifest alone.
    assert in_minute_3.count() == 300
    assert not trace.exists()

    assert len(df.filter("partition IN (0, 2) AND offset <= 99").collect()) == 200
    assert opened(trace) == [segment(0, 0), segment(2, 0)]

    trace.unlink()
    assert df.filter("offset IN (5, 905)").count() == 6
    assert opened(trace) == sorted(segment(p, s) for p in range(3) for s in (0, 900))


def test_filters_plateau_does_not_take_are_left_to_spark(
    spark: SparkSession, minutes_store: Store, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    df = load(spark, minutes_store, "t", traceFile=str(trace))
    # `value` is not pushed (Spark applies it); the offset bound still prunes.
    rows = df.filter("offset >= 900 AND value = CAST('v905-v905-v905-v' AS BINARY)").collect()
    assert [(r.partition, r.offset) for r in rows] == [(0, 905), (1, 905), (2, 905)]
    assert opened(trace) == [segment(p, 900) for p in range(3)]
    # OR across columns is not pushed either; the answer is still right.
    assert df.filter("offset = 5 OR partition = 2").count() == 2 + 1000


def test_timestamp_bounds_are_exact_at_millisecond_resolution(
    spark: SparkSession, minutes_store: Store
) -> None:
    df = load(spark, minutes_store, "t").filter("partition = 0")
    t = at_minute(2) + timedelta(milliseconds=5)  # row offset 205 of partition 0
    half = timedelta(microseconds=500)
    assert df.filter(fn.col("timestamp") == t).select("offset").collect()[0].offset == 205
    assert df.filter(fn.col("timestamp") == t + half).count() == 0
    assert df.filter(fn.col("timestamp") > t).agg(fn.min("offset")).first()[0] == 206
    assert df.filter(fn.col("timestamp") >= t + half).agg(fn.min("offset")).first()[0] == 206
    assert df.filter(fn.col("timestamp") < t + half).agg(fn.max("offset")).first()[0] == 205
    assert df.filter(fn.col("timestamp") <= t - half).agg(fn.max("offset")).first()[0] == 204
    assert df.filter(fn.col("timestamp").isin(t, t + half)).count() == 1


LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)


@pytest.mark.parametrize(
    ("predicate", "offsets"),
    [
        (f"offset <= {LONG_MAX}", range(10)),
        (f"{LONG_MAX} >= offset", range(10)),
        (f"offset > {LONG_MAX}", []),
        (f"offset = {LONG_MAX}", []),
        (f"offset >= {LONG_MAX}", []),
        (f"offset IN (3, {LONG_MAX})", [3]),
        (f"offset IN (3, {LONG_MAX}) AND offset <= {LONG_MAX}", [3]),
        (f"offset < {LONG_MIN}", []),
        (f"offset >= {LONG_MIN}", range(10)),
        (f"offset > {LONG_MIN} AND offset < 4", range(4)),
        (f"timestamp >= timestamp_micros({LONG_MAX})", []),
        (f"timestamp < timestamp_micros({LONG_MAX})", range(10)),
        (f"timestamp > timestamp_micros({LONG_MIN})", range(10)),
        (f"timestamp <= timestamp_micros({LONG_MIN})", []),
        ("partition <= 2147483647", range(10)),
        ("partition > 2147483647", []),
    ],
)
def test_comparisons_at_the_ends_of_the_long_range(
    spark: SparkSession, tmp_path: Path, predicate: str, offsets: range | list[int]
) -> None:
    """Literals at Long.MAX_VALUE and Long.MIN_VALUE: the bound just past them does not wrap
    around, for the rows read, the segments planned and the counts the manifest answers."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "t", 0, [batch(range(10))], roll_rows=10)
    df = load(spark, store, "t").filter(predicate)
    spark_side = load(spark, store, "t", pushdown="false").filter(predicate)
    assert sorted(r.offset for r in df.select("offset").collect()) == list(offsets)
    assert sorted(r.offset for r in spark_side.select("offset").collect()) == list(offsets)
    assert df.count() == len(offsets)
    store.close()


def test_dataframe_queried_with_then_without_a_filter_is_not_stale(
    spark: SparkSession, minutes_store: Store
) -> None:
    df = load(spark, minutes_store, "t")
    assert df.filter("offset < 100").count() == 300
    assert df.count() == 3000
    assert df.filter("partition = 2").count() == 1000
    assert df.agg(fn.min("offset"), fn.max("offset")).first() == (0, 999)
    assert df.count() == 3000

    more = [batch(range(1000, 1100), times=[BASE_MS + 10 * MINUTE_MS + j for j in range(100)])]
    write_segments(minutes_store, "t", 0, more, roll_rows=100)
    assert load(spark, minutes_store, "t").count() == 3100
    assert df.count() == 3100  # each query plans its segments from the manifest


def test_a_column_widened_after_load_fails_the_query_naming_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The schema is taken at load(): a segment sealed since that holds a column in a wider
    type than planned is never read through the planned one (a double's bits as a bigint, an
    int64 cut to an int); the query fails naming the segment, the column and both types."""
    store = Store.open(tmp_path / "data")
    inner = pa.struct([pa.field("a", pa.int32())])
    wider = pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])
    first = {
        "x": pa.array([1, 2], pa.int64()),
        "n": pa.array([7, 8], pa.int32()),
        "s": pa.array([{"a": 1}, {"a": 2}], inner),
    }
    later = {
        "x": pa.array([1.5, -2.25], pa.float64()),  # a JSON field that met a fraction
        "n": pa.array([5_000_000_000, 9], pa.int64()),
        "s": pa.array([{"a": 2**40, "b": "p"}, {"a": 3, "b": None}], wider),
    }
    write_segments(store, "j", 0, [batch(range(2), extra=first)], roll_rows=2)
    df = load(spark, store, "j")
    write_segments(store, "j", 0, [batch(range(2, 4), extra=later)], roll_rows=2)

    path = re.escape(segment(0, 2, topic="j"))
    where = rf"topic 'j', segment {path} \(partition 0, offsets \[2, 4\)\)"
    again = r"Load the DataFrame again \(restart a streaming query\)"
    expected = [
        ("x", r"column 'x' is double \(Arrow FloatingPoint\(DOUBLE\)\) on disk, .* with bigint"),
        ("n", r"column 'n' is bigint \(Arrow Int\(64, true\)\) on disk, .* with int"),
        ("s.a", r"column 's' is struct<a:bigint,b:string> .* with struct<a:int>"),
    ]
    for column, problem in expected:
        with pytest.raises((PySparkException, Py4JJavaError), match=f"{where}: {problem}.*{again}"):
            df.selectExpr("offset", column).collect()
    # The older segment still reads (the filter leaves the new one out), and a new load()
    # reads the widened columns.
    assert df.filter("offset < 2").select("x", "n", "s.a").collect() == [(1, 7, 1), (2, 8, 2)]
    fresh = load(spark, store, "j").orderBy("offset").select("x", "n", "s.a", "s.b")
    assert [tuple(r) for r in fresh.collect()] == [
        (1.0, 7, 1, None),
        (2.0, 8, 2, None),
        (1.5, 5_000_000_000, 2**40, "p"),
        (-2.25, 9, 3, None),
    ]
    store.close()


def test_a_narrower_column_sealed_after_load_reads_as_planned(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What a new load() would widen anyway is read exactly: int32 under a planned bigint, an
    int64 under a planned double."""
    store = Store.open(tmp_path / "data")
    first = {"x": pa.array([0.5], pa.float64()), "n": pa.array([2**40], pa.int64())}
    later = {"x": pa.array([3], pa.int64()), "n": pa.array([-4], pa.int32())}
    write_segments(store, "w", 0, [batch([0], extra=first)], roll_rows=1)
    df = load(spark, store, "w")
    write_segments(store, "w", 0, [batch([1], extra=later)], roll_rows=1)
    rows = df.orderBy("offset").select("x", "n").collect()
    assert [tuple(r) for r in rows] == [(0.5, 2**40), (3.0, -4)]
    assert df.schema["x"].dataType == load(spark, store, "w").schema["x"].dataType
    store.close()


def test_manifest_url_option_reads_the_same_store(
    spark: SparkSession, minutes_store: Store
) -> None:
    reader = spark.read.format("plateau").option("topic", "t")
    if minutes_store.manifest.is_sqlite:
        url = f"sqlite:///{minutes_store.data_dir / 'manifest.db'}"
        df = reader.option("manifest", url).load()  # the data folder is the file's
    else:
        url = minutes_store.manifest.url
        with pytest.raises(Exception, match=r"a PostgreSQL manifest needs option"):
            reader.option("manifest", url).load()
        df = reader.option("manifest", url).option("path", str(minutes_store.data_dir)).load()
    assert df.filter("partition = 1").count() == 1000


def test_a_postgresql_manifest_url_with_a_plus_in_its_user_reads_as_plateau_does(
    spark: SparkSession, tmp_path: Path, postgres: PostgresServer
) -> None:
    """In a manifest URL's user and password, `+` is a plus sign (SQLAlchemy's reading, so
    plateau's), `%2B` one too: neither is a space."""
    database = postgres.new_database().rsplit("/", 1)[1]
    with psycopg2.connect(
        host="127.0.0.1", port=postgres.port, user="postgres", dbname=database
    ) as conn:
        conn.autocommit = True
        with conn.cursor() as cursor:
            cursor.execute('CREATE ROLE "reader+1" LOGIN SUPERUSER')
    url = f"postgresql+psycopg2://reader+1:pass+word@127.0.0.1:{postgres.port}/{database}"
    store = Store.open(tmp_path / "data", manifest_url=url)
    write_segments(store, "t", 0, [batch(range(10))], roll_rows=10)
    for manifest in (url, url.replace("reader+1", "reader%2B1")):
        df = (
            spark.read.format("plateau")
            .option("path", str(store.data_dir))
            .option("manifest", manifest)
            .option("topic", "t")
            .load()
        )
        assert df.count() == 10
    store.close()


def test_a_postgresql_manifest_urls_parameters_reach_the_jdbc_driver(
    spark: SparkSession, tmp_path: Path, postgres: PostgresServer
) -> None:
    """sslmode and its kin are passed on, not dropped: dropped, verify-full read the manifest
    without checking the server. The test server has no TLS, so require must fail; a
    parameter the driver has no name for is refused by name."""
    url = postgres.new_database()
    store = Store.open(tmp_path / "data", manifest_url=url)
    write_segments(store, "t", 0, [batch(range(10))], roll_rows=10)

    def count(manifest: str) -> int:
        return int(
            spark.read.format("plateau")
            .option("path", str(store.data_dir))
            .option("manifest", manifest)
            .option("topic", "t")
            .load()
            .count()
        )

    try:
        assert count(f"{url}?sslmode=disable&connect_timeout=10&application_name=x") == 10
        with pytest.raises(Exception, match=r"(?i)SSL"):
            count(f"{url}?sslmode=require")
        with pytest.raises(Exception, match="parameter 'target_session_attrs'"):
            count(f"{url}?target_session_attrs=read-write")
    finally:
        store.close()


def test_groups_small_neighbouring_segments_into_one_task(
    spark: SparkSession, minutes_store: Store
) -> None:
    one_each = load(spark, minutes_store, "t", maxPartitionBytes="1")
    grouped = load(spark, minutes_store, "t")
    assert one_each.rdd.getNumPartitions() == 30
    assert grouped.rdd.getNumPartitions() == 1  # 30 segments of ~4 kB: one task
    assert grouped.count() == one_each.count() == 3000
    # A segment counts for the share of it a filter keeps: half of three ~3.6 kB segments
    # per 4 kB task is two tasks, not three.
    half = load(spark, minutes_store, "t", maxPartitionBytes="4000").filter("offset < 50")
    assert half.rdd.getNumPartitions() == 2
    assert half.count() == 150


def test_bad_options_and_unknown_topics_are_named(
    spark: SparkSession, minutes_store: Store, tmp_path: Path
) -> None:
    with pytest.raises(PySparkException, match="is not in the plateau store"):
        load(spark, minutes_store, "nope").count()
    with pytest.raises(PySparkException, match="no plateau store at"):
        spark.read.format("plateau").option("path", str(tmp_path / "x")).option("topic", "t").load()
    with pytest.raises(PySparkException, match="maxpartitionbytes must be a positive integer"):
        load(spark, minutes_store, "t", maxPartitionBytes="lots").count()
