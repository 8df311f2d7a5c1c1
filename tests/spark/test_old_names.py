"""Segments sealed before data fields named like plateau's columns got a `_` suffix, read by
the Spark connector and replicated: their `partition`, `Timestamp` and `KEY` columns read as
`partition_`, `Timestamp_` and `KEY_`, the columns newer segments hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn

from plateau_core import Store
from plateau_spark.errors import TopicReplicationError
from plateau_spark.replication import Replicator, Target
from tests.core.test_old_names import new, old, segment
from tests.spark.iceberg_support import replicator
from tests.support import BASE_MS, record_segment

COLUMNS = ["partition", "offset", "timestamp", "key", "value", "partition_", "Timestamp_", "KEY_"]


def load(spark: SparkSession, store: Store) -> DataFrame:
    return (
        spark.read.format("plateau").option("path", str(store.data_dir)).option("topic", "t").load()
    )


@pytest.fixture
def mixed(tmp_path: Path) -> Iterator[Store]:
    """Topic `t`: partition 0 an old segment then a new one, partition 1 an old one."""
    with Store.open(tmp_path / "data") as store:
        record_segment(store, "t", 0, old(range(10)))
        record_segment(store, "t", 0, new(range(10, 20)))
        record_segment(store, "t", 1, old(range(100, 105)))
        yield store


def test_the_connector_reads_old_columns_as_the_suffixed_ones(
    spark: SparkSession, mixed: Store
) -> None:
    df = load(spark, mixed)
    assert df.columns == COLUMNS
    assert dict(df.dtypes)["Timestamp_"] == "bigint"
    rows = {r.offset: r for r in df.collect()}
    assert sorted(rows) == [*range(20), *range(100, 105)]
    for offset, row in rows.items():
        assert (row.partition, row.partition_, row.Timestamp_, row.KEY_) == (
            0 if offset < 100 else 1,
            offset % 3,
            offset,
            f"K{offset}",
        )
    # The connector's own columns resolve as they do in any topic, and the data columns too.
    by_partition = {r.partition: r[1] for r in df.groupBy("partition").count().collect()}
    assert by_partition == {0: 20, 1: 5}
    late = df.filter(fn.col("timestamp") >= fn.timestamp_millis(fn.lit(BASE_MS + 15)))
    assert late.count() == 10
    assert df.filter("partition_ = 1").count() == 9
    assert df.agg(fn.sum("Timestamp_")).collect()[0][0] == sum(range(20)) + sum(range(100, 105))
    assert df.filter("KEY_ = 'K3'").select("offset").collect()[0][0] == 3


@pytest.mark.parametrize("through_spark", [False, True], ids=["pyarrow", "connector"])
def test_old_segments_replicate_into_the_suffixed_parquet_columns(
    spark: SparkSession, mixed: Store, tmp_path: Path, through_spark: bool
) -> None:
    """Before, the Parquet replica renamed an old `partition` to `partition_` and the new
    `partition_` to `partition__`: two columns for one field. The readers give the replica
    `partition_` alone, which it writes as it is, beside its `partition` folders."""
    target = tmp_path / "replica"
    Replicator(mixed, Target.parse(str(target))).run_once(spark if through_spark else None)
    files = sorted((target / "t").rglob("*.parquet"))
    assert len(files) == 2
    for path in files:
        names = pq.read_schema(path).names
        assert "partition_" in names and not {"partition", "partition__"} & set(names)
    copy = spark.read.parquet(str(target / "t"))
    assert "partition__" not in copy.columns
    got = {r.offset: (r.partition, r.partition_, r.Timestamp_) for r in copy.collect()}
    assert got == {o: (0 if o < 100 else 1, o % 3, o) for o in [*range(20), *range(100, 105)]}


def test_old_segments_replicate_into_the_suffixed_iceberg_columns(
    mixed: Store, tmp_path: Path
) -> None:
    job = replicator(mixed, tmp_path / "warehouse")
    job.run_once()
    rows = job.table("t").scan().to_arrow().to_pydict()
    assert "partition__" not in rows
    got = dict(
        zip(rows["offset"], zip(rows["partition_"], rows["Timestamp_"], strict=True), strict=True)
    )
    assert got == {o: (o % 3, o) for o in [*range(20), *range(100, 105)]}


def test_a_segment_holding_both_names_fails_the_load_naming_it(
    spark: SparkSession, mixed: Store
) -> None:
    both = segment(range(20, 23), Timestamp=pa.array([1, 2, 3]), Timestamp_=pa.array([4, 5, 6]))
    record_segment(mixed, "t", 0, both)
    with pytest.raises((Py4JJavaError, PySparkException)) as refused:
        load(spark, mixed)
    message = str(refused.value)
    assert "topic 't': segment topics/t/0/00000000000000000020.arrow" in message
    assert "'Timestamp' and 'Timestamp_'" in message


def test_a_segment_holding_both_names_sealed_after_the_load_fails_the_query_naming_it(
    spark: SparkSession, mixed: Store
) -> None:
    df = load(spark, mixed)
    both = segment(range(20, 23), KEY=pa.array(["a"] * 3), KEY_=pa.array(["b"] * 3))
    record_segment(mixed, "t", 0, both)
    with pytest.raises((Py4JJavaError, PySparkException)) as refused:
        df.collect()
    message = str(refused.value)
    assert "segment topics/t/0/00000000000000000020.arrow (t[0]" in message
    assert "'KEY' and 'KEY_'" in message


def test_a_segment_holding_both_names_holds_back_its_topic_from_replication(
    mixed: Store, tmp_path: Path
) -> None:
    """The other topics are replicated; the refused one is named, with its segment file."""
    both = segment(range(3), partition=pa.array([7] * 3), partition_=pa.array([8] * 3))
    record_segment(mixed, "twin", 0, both)
    target = tmp_path / "replica"
    with pytest.raises(TopicReplicationError) as refused:
        Replicator(mixed, Target.parse(str(target))).run_once()
    assert set(refused.value.failed) == {"twin"}
    message = str(refused.value)
    assert "topic 'twin': segment topics/twin/0/00000000000000000000.arrow" in message
    assert "'partition' and 'partition_'" in message
    assert {s.state.value for s in mixed.manifest.segments("t")} == {"replicated"}
    assert {s.state.value for s in mixed.manifest.segments("twin")} == {"sealed"}
