"""Bloom filters in the JVM connector: the Java probe agrees with the Python filters bit for
bit, and equality / IN queries on indexed columns skip segments without changing a result."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
import xxhash
from pyspark.sql import SparkSession

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.bloom import Bloom, build, canonical
from plateau_core.policies import IndexPolicy
from tests.core.test_blooms import ROWS, SEGMENTS, _batch, request_id
from tests.spark.test_connector import plan_of
from tests.spark.test_source import load, opened
from tests.support import append_patiently
from tests.unit.test_bloom import VECTOR_VALUES, vector_bloom


def _jvm_bloom(spark: SparkSession) -> object:
    return spark.sparkContext._jvm.org.plateau.spark.Bloom  # type: ignore[union-attr]


def _signed(value: int) -> int:
    """A 64-bit hash as Java's long holds it."""
    return value - 2**64 if value >= 2**63 else value


def _random_values(rng: random.Random, count: int) -> list[str | bytes | int]:
    values: list[str | bytes | int] = []
    for i in range(count):
        choice = i % 3
        if choice == 0:
            values.append("".join(rng.choice("abcé€😀 -") for _ in range(rng.randint(0, 12))))
        elif choice == 1:
            values.append(rng.randbytes(rng.randint(0, 20)))
        else:
            values.append(rng.randint(-(2**63), 2**63 - 1))
    return values


def test_java_hashes_and_probes_exactly_as_python_builds(spark: SparkSession) -> None:
    java = _jvm_bloom(spark)
    rng = random.Random(18)
    members = _random_values(rng, 300)
    strangers = _random_values(rng, 600)
    for raw in [b"", b"abc", *[canonical("bytes", v) for v in members if not isinstance(v, int)]]:
        assert raw is not None
        assert java.hash(bytearray(raw)) == _signed(xxhash.xxh64_intdigest(raw))
    filters: list[Bloom] = [vector_bloom("int"), vector_bloom("bytes")]
    for fpp in (0.5, 0.01):
        ints = [v for v in members if isinstance(v, int)]
        raws = [v.encode() if isinstance(v, str) else v for v in members if not isinstance(v, int)]
        int_filter = build("n", pa.array(ints, pa.int64()), fpp)
        bytes_filter = build("k", pa.array(raws, pa.binary()), fpp)
        assert int_filter is not None and bytes_filter is not None
        filters += [int_filter, bytes_filter]
    agreed = absent = 0
    for bloom in filters:
        for value in [*VECTOR_VALUES, *members, *strangers]:
            raw = canonical(bloom.kind, value)
            if raw is None:
                continue
            in_java = java.mayContain(bytearray(bloom.bits), bloom.hashes, bytearray(raw))
            assert in_java == bloom.may_contain(value), (bloom.column, bloom.kind, value)
            agreed += 1
            absent += not in_java
    assert absent > 100  # the comparison covered "absent" answers, not only "maybe"
    assert agreed > 1000
    for number in (2**40 + 5, -(2**40), 2**63 - 1):  # passed to the JVM as a Long
        assert bytes(java.canonical("int", number)) == canonical("int", number)


@pytest.fixture
def needle_store(tmp_path: Path) -> Store:
    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(fsync=False))
    index = IndexPolicy(bloom=("request_id", "key", "status"), fpp=0.01)
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600), index=index)
        for i in range(SEGMENTS):
            append_patiently(writer, "logs", 0, _batch(i * ROWS))
        writer.flush()
    finally:
        writer.close()
    return store


def test_equality_and_in_skip_segments_the_filters_rule_out(
    spark: SparkSession, needle_store: Store, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    df = load(spark, needle_store, "logs", traceFile=str(trace), maxPartitionBytes="1")
    spark_side = load(spark, needle_store, "logs", pushdown="false")
    needle = request_id(7 * ROWS + 3)
    query = f"request_id = '{needle}'"
    assert "BloomFilterColumns: [request_id]" in plan_of(df.filter(query))
    assert [r.offset for r in df.filter(query).select("offset").collect()] == [7 * ROWS + 3]
    assert opened(trace) == [f"topics/logs/0/{7 * ROWS:020d}.arrow"]

    for where in [
        f"request_id IN ('{needle}', '{request_id(2)}', 'absent')",
        "key = X'757365722D33' AND status = 201",  # the key b"user-3"
        "status IN (200, 202)",
        "request_id = 'absent'",
        "status = 999",
        f"request_id = '{needle}' OR status = 999",  # an OR prunes nothing: same rows
    ]:
        trace.unlink(missing_ok=True)
        got = sorted(r.offset for r in df.filter(where).select("offset").collect())
        assert got == sorted(r.offset for r in spark_side.filter(where).select("offset").collect())
        holding = {f"topics/logs/0/{(o // ROWS) * ROWS:020d}.arrow" for o in got}
        assert holding <= set(opened(trace)), where
        if where in ("request_id = 'absent'", "status = 999"):
            assert opened(trace) == []
    trace.unlink(missing_ok=True)
    assert len(opened(trace)) == 0
    df.filter(f"request_id IN ('{needle}', '{request_id(2)}')").count()
    assert len(opened(trace)) == 2


def test_a_count_by_key_reads_only_the_segments_its_filters_admit(
    spark: SparkSession, needle_store: Store, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    df = load(spark, needle_store, "logs", traceFile=str(trace))
    spark_side = load(spark, needle_store, "logs", pushdown="false")
    absent = df.filter("key = CAST('nobody' AS BINARY)")
    assert "answered from the manifest" in plan_of(absent.groupBy().count())
    assert absent.count() == 0
    assert opened(trace) == []  # every segment's filter rules the key out
    present = "key = CAST('user-3' AS BINARY)"
    assert "cut segments read at planning" in plan_of(df.filter(present).groupBy().count())
    assert df.filter(present).count() == spark_side.filter(present).count() > 0
