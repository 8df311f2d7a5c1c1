"""The connector's answers against two others on the same store: the Python reader's rows
(queried by Spark as an in-memory table) and the connector with pushdown off. Filters,
limits, sorts and aggregates over segments whose schema evolves, consolidated segments,
partitions without segments, keys null, empty and binary; and a stream that reads on while
segments are added and consolidated."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming import StreamingQuery

import plateau_core.segment_file
from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.consolidate import Consolidator
from plateau_core.policies import ConsolidatePolicy, IndexPolicy
from plateau_core.schema import HEADERS_TYPE
from tests.spark.conftest import write_segments
from tests.spark.test_source import load
from tests.support import BASE_MS, append_patiently, batch

KEYS = [None, b"", b"\x00\xff", b"k1", b"k2"]
# The views every query runs against: the connector, the connector with pushdown off, and
# the Python reader's rows.
VIEWS = {"pushed": "diff_pushed", "spark": "diff_spark", "reader": "diff_reader"}


def rows(offsets: range, times: list[int], extra: dict[str, pa.Array]) -> pa.RecordBatch:
    columns: dict[str, pa.Array] = {
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array(times, pa.timestamp("ms", tz="UTC")),
        "key": pa.array([KEYS[o % len(KEYS)] for o in offsets], pa.binary()),
        "value": pa.array([f"v{o}".encode() for o in offsets], pa.binary()),
    }
    return pa.RecordBatch.from_pydict({**columns, **extra})


def headers(n: int) -> pa.Array:
    cycle = [[{"key": "h", "value": b"\x00"}], None, []]
    return pa.array([cycle[i % 3] for i in range(n)], HEADERS_TYPE)


def write(store: Store, partition: int, segments: list[list[pa.RecordBatch]]) -> None:
    """Each inner list is one segment, each of its batches one record batch of the file."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("d", partition, roll=RollPolicy(max_rows=10**9, max_age_s=3600))
        for segment in segments:
            for data in segment:
                append_patiently(writer, "d", partition, data)
            writer.flush()
    finally:
        writer.close()


@pytest.fixture
def varied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """Topic `d`. Partition 0: four segments of three record batches, times out of order
    within a segment, column `a` int32 then int64 then double, `s` and the all-null `n` added
    by the second. Partition 1: segments whose last time equals the next one's first, three of
    them consolidated, two written after. Partition 2: two segments with an offset gap, every
    row at one time, consolidated. Partition 3: a watermark and no segments."""
    monkeypatch.setattr(plateau_core.segment_file, "MIN_BATCH_ROWS", 1)  # an append, a batch
    store = Store.open(tmp_path / "data")
    spread = random.Random(7)
    segments, start = [], 0
    for kind in ("int32", "int64", "double", "int32"):
        segment = []
        for _ in range(3):
            offsets = range(start, start + 10)
            times = [BASE_MS + start + spread.randrange(20) for _ in offsets]
            extra: dict[str, pa.Array]
            if kind == "int32":
                extra = {
                    "a": pa.array([o % 5 for o in offsets], pa.int32()),
                    "headers": headers(10),
                }
            elif kind == "int64":
                extra = {
                    "a": pa.array([o % 7 for o in offsets], pa.int64()),
                    "s": pa.array([None if o % 4 == 0 else f"s{o % 3}" for o in offsets]),
                    "n": pa.nulls(10),
                }
            else:
                extra = {
                    "a": pa.array([o / 4 for o in offsets]),
                    "s": pa.array([f"s{o % 2}" for o in offsets]),
                }
            segment.append(rows(offsets, times, extra))
            start += 10
        segments.append(segment)
    write(store, 0, segments)

    def touching(first_segment: int, count: int) -> list[list[pa.RecordBatch]]:
        out = []
        for i in range(first_segment, first_segment + count):
            segment = []
            for j in range(2):
                offsets = range(10 * i + 5 * j, 10 * i + 5 * j + 5)
                times = [BASE_MS + 100 * i + 50 * j + 10 * k for k in range(5)]
                if j == 1:
                    times[-1] = BASE_MS + 100 * (i + 1)  # the next segment's first time
                extra = {"a": pa.array([1] * 5, pa.int32()), "headers": headers(5)}
                segment.append(rows(offsets, times, extra))
            out.append(segment)
        return out

    write(store, 1, touching(0, 4))
    same_time = [BASE_MS + 55] * 8
    write(store, 2, [[rows(range(0, 8), same_time, {})], [rows(range(20, 28), same_time, {})]])
    size = max(s.size_bytes for s in store.manifest.segments("d", partitions=[1]))
    policy = ConsolidatePolicy(target_bytes=3 * size + 1, min_age_s=0)
    merged = Consolidator(store, {"d": policy}, fsync=False).run().merged
    assert sorted((m.partition, m.start_offset, m.end_offset) for m in merged) == [
        (1, 0, 30),
        (2, 0, 28),
    ]
    write(store, 1, touching(4, 2))
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("d", 3, roll=RollPolicy(max_age_s=3600))
        writer.skip("d", 3, 40)
        writer.flush()
    finally:
        writer.close()
    return store


def register_views(spark: SparkSession, store: Store) -> None:
    load(spark, store, "d").createOrReplaceTempView(VIEWS["pushed"])
    load(spark, store, "d", pushdown="false").createOrReplaceTempView(VIEWS["spark"])
    parts = []
    for partition in range(4):
        table = store.read("d", partitions=[partition]).to_table()
        numbers = pa.array([partition] * table.num_rows, pa.int32())
        parts.append(table.add_column(0, "partition", numbers))
    reader = spark.createDataFrame(pa.concat_tables(parts, promote_options="default"))
    assert reader.schema.simpleString() == spark.table(VIEWS["pushed"]).schema.simpleString()
    reader.createOrReplaceTempView(VIEWS["reader"])


def answer(spark: SparkSession, query: str, view: str) -> list[str]:
    return sorted(repr(r) for r in spark.sql(query.format(v=VIEWS[view])).collect())


def differences(spark: SparkSession, queries: list[str]) -> list[str]:
    """Each query whose answer through the connector (pushed or not) is not the reader's."""
    found = []
    for query in queries:
        want = answer(spark, query, "reader")
        for view in ("pushed", "spark"):
            got = answer(spark, query, view)
            if got != want:
                found.append(f"{view}: {query}\n  got  {got[:8]}\n  want {want[:8]}")
    return found


OFFSETS = [-1, 0, 1, 4, 5, 9, 10, 11, 19, 20, 21, 27, 28, 29, 30, 31, 59, 60, 61, 89, 90, 120]
TIMES = [0, 1, 30, 31, 38, 40, 50, 55, 62, 69, 98, 100, 129, 200, 300, 400, 600, 601]
OPERATORS = ["=", "<", "<=", ">", ">=", "<=>", "!="]


def at(ms: float) -> str:
    moment = datetime.fromtimestamp(BASE_MS / 1000, UTC) + timedelta(microseconds=round(ms * 1000))
    return f"TIMESTAMP '{moment:%Y-%m-%d %H:%M:%S.%f}'"


def condition(pick: random.Random, depth: int = 0, *, whole: bool = False) -> str:
    """One condition: a comparison at a segment or batch boundary (a time between two
    milliseconds too), an IN list, a key, another column, or NOT/OR/AND of conditions. With
    `whole`, only those the connector takes whole: comparisons and lists of offsets, times and
    partitions, and key equalities."""
    if whole:
        kind = pick.choice([0, 1, 2, 3, 4, 5, 6, 7, 9, 10])
        op = pick.choice([o for o in OPERATORS if o != "!="])
    else:
        kind = pick.randrange(14 if depth < 2 else 11)
        op = pick.choice(OPERATORS)
    if kind == 0:
        return f"`offset` {op} {pick.choice(OFFSETS)}"
    if kind == 1:
        return f"{pick.choice(OFFSETS)} {op} `offset`"
    if kind == 2:
        return f"`timestamp` {op} {at(pick.choice(TIMES) + pick.choice([0, 0, 0.5, -0.5]))}"
    if kind == 3:
        return f"`partition` {op} {pick.randrange(-1, 5)}"
    if kind == 4:
        return f"`partition` IN ({', '.join(map(str, pick.sample(range(-1, 5), 3)))})"
    if kind == 5:
        values = [str(v) for v in pick.sample(OFFSETS, pick.randrange(1, 5))]
        nulls = ["NULL"] * (not whole and pick.random() < 0.2)
        return f"`offset` IN ({', '.join(values + nulls)})"
    if kind == 6:
        stamps = [at(pick.choice(TIMES) + pick.choice([0, 0, 0.5])) for _ in range(3)]
        return f"`timestamp` IN ({', '.join(stamps)})"
    if kind == 7:
        equal = ["key = X'00FF'", "key = X''", "key <=> X''", "X'6B32' = key"]
        if whole:
            return pick.choice(equal)
        return pick.choice(
            [
                *equal,
                "key = CAST('k1' AS BINARY)",
                "key IS NULL",
                "key IS NOT NULL",
                "key IN (X'', X'6B31')",
                "key != X''",
            ]
        )
    if kind == 8:
        return pick.choice(
            ["a > 2", "a IS NULL", "s = 's1'", "n IS NULL", "size(headers) > 0", "headers IS NULL"]
        )
    if kind == 9:
        low = pick.choice(OFFSETS)
        return f"`offset` BETWEEN {low} AND {low + pick.randrange(40)}"
    if kind == 10:
        low = pick.choice(TIMES)
        return f"`timestamp` BETWEEN {at(low)} AND {at(low + pick.randrange(100))}"
    if kind == 11:
        return f"NOT ({condition(pick, depth + 1)})"
    if kind == 12:
        return f"({condition(pick, depth + 1)} OR {condition(pick, depth + 1)})"
    return f"({condition(pick, depth + 1)} AND {condition(pick, depth + 1)})"


def test_filters_and_aggregates_answer_as_the_reader_and_spark_do(
    spark: SparkSession, varied: Store
) -> None:
    register_views(spark, varied)
    pick = random.Random(20261126)
    found = []
    for i in range(12):
        where = " AND ".join(condition(pick) for _ in range(pick.randrange(1, 4)))
        queries = [
            f"SELECT `partition`, `offset` FROM {{v}} WHERE {where}",
            "SELECT count(*), min(`offset`), max(`offset`), min(`timestamp`), max(`timestamp`),"
            f" min(`partition`), max(`partition`), count(`offset`) FROM {{v}} WHERE {where}",
            "SELECT `partition`, count(*), min(`offset`), max(`timestamp`) FROM {v}"
            f" WHERE {where} GROUP BY `partition`",
        ]
        if i % 3 == 0:
            queries.append(f"SELECT * FROM {{v}} WHERE {where}")
        found += differences(spark, queries)

        # LIMIT: as many rows as asked for (or all there are), each a row of the answer.
        k = pick.choice([0, 1, 3, 7, 25, 1000])
        every = set(
            answer(spark, f"SELECT `partition`, `offset` FROM {{v}} WHERE {where}", "reader")
        )
        limited = answer(
            spark, f"SELECT `partition`, `offset` FROM {{v}} WHERE {where} LIMIT {k}", "pushed"
        )
        if len(limited) != min(k, len(every)) or not set(limited) <= every:
            found.append(f"LIMIT {k}: {where}: {len(limited)} rows of {len(every)}")
        order = ("DESC", "ASC")[i % 2]
        top = f"SELECT `timestamp` FROM {{v}} WHERE {where} ORDER BY `timestamp` {order} LIMIT {k}"
        found += differences(spark, [top])
    assert not found, "\n".join(found)


def test_aggregates_the_connector_answers_while_planning_equal_the_readers(
    spark: SparkSession, varied: Store
) -> None:
    register_views(spark, varied)
    pick = random.Random(20261127)
    found = []
    answered = 0
    for _ in range(20):
        where = " AND ".join(condition(pick, whole=True) for _ in range(pick.randrange(1, 4)))
        totals = (
            "SELECT count(*), min(`offset`), max(`offset`), min(`timestamp`), max(`timestamp`),"
            f" max(`partition`) FROM {{v}} WHERE {where}"
        )
        grouped = f"SELECT `partition`, count(*), max(`offset`) FROM {{v}} WHERE {where} GROUP BY 1"
        found += differences(spark, [totals, grouped])
        plan = spark.sql(totals.format(v=VIEWS["pushed"]))._jdf.queryExecution().executedPlan()
        answered += "cut segments read at planning" in plan.toString()
    assert not found, "\n".join(found)
    assert answered >= 10  # most of them cut a segment and were counted while planning


def test_queries_at_the_edges_answer_as_the_reader_does(spark: SparkSession, varied: Store) -> None:
    register_views(spark, varied)
    ms = f"{datetime.fromtimestamp(BASE_MS / 1000, UTC):%Y-%m-%d %H:%M:%S}"
    queries = [
        "SELECT `timestamp` FROM {v} ORDER BY `timestamp` DESC LIMIT 3 OFFSET 2",
        "SELECT `timestamp` FROM {v} ORDER BY `timestamp` LIMIT 4 OFFSET 5",
        "SELECT count(*) FROM (SELECT `offset` FROM {v} LIMIT 3 OFFSET 2)",
        "SELECT max(`timestamp`) FROM {v} WHERE `offset` >= 5 AND `offset` < 5",
        "SELECT min(`timestamp`), max(`timestamp`) FROM {v} GROUP BY `partition`",
        "SELECT `partition`, count(*) FROM {v} WHERE `partition` = 3 GROUP BY `partition`",
        "SELECT count(*), min(`offset`) FROM {v} WHERE `partition` = 3",
        "SELECT count(DISTINCT `partition`), count(1), count(key), count(n), count(a) FROM {v}",
        "SELECT max(`offset`), count(*) FROM {v} WHERE key = X''",
        "SELECT `partition`, max(`timestamp`) FROM {v} GROUP BY `partition` HAVING count(*) > 20",
        f"SELECT sum(`offset`) FROM {{v}} WHERE `timestamp` >= TIMESTAMP '{ms}.100'",
        "SELECT count(*) FROM {v} x JOIN {v} y ON x.`partition` = y.`partition`"
        f" AND x.`offset` = y.`offset` WHERE x.`offset` < 10 AND y.`timestamp` > '{ms}.005'",
        "SELECT `partition`, `offset` FROM {v} WHERE `offset` < 10"
        " EXCEPT SELECT `partition`, `offset` FROM {v} WHERE `offset` < 5",
        f"SELECT count(*) FROM {{v}} WHERE `timestamp` = TIMESTAMP_NTZ '{ms}.055'",
        f"SELECT count(*) FROM {{v}} WHERE `timestamp` > DATE '{ms[:10]}'",
        "SELECT count(*) FROM {v} WHERE `offset` > 10.5 AND `offset` <> '20'",
        "SELECT count(*) FROM {v} WHERE key = 'k1' AND key IN (X'6B31')",
        "SELECT count(*) FROM {v} WHERE key = X'6B31' AND key = X'6B32'",
        "SELECT count(*) FROM {v} WHERE `offset` IN"
        " (SELECT `offset` FROM {v} WHERE `partition` = 2)",
        "SELECT count(*) FROM {v} WHERE `timestamp` = (SELECT max(`timestamp`) FROM {v})",
        "SELECT min(`offset`), max(`offset`) FROM {v}"
        " WHERE `offset` IN (1, 2, 3) AND `offset` IN (3, 4)",
        "SELECT count(*) FROM {v} WHERE `offset` NOT IN (1, NULL) OR `offset` <=> NULL",
    ]
    found = differences(spark, queries)
    assert not found, "\n".join(found)


def test_reader_ranges_equal_the_same_filters_pushed(spark: SparkSession, varied: Store) -> None:
    """Store.read's partitions, offset and time ranges against the equivalent Spark filter."""
    df = load(spark, varied, "d")
    pick = random.Random(5)
    for _ in range(8):
        partitions = sorted(pick.sample(range(4), pick.randrange(1, 4)))
        first, end = sorted(pick.sample(OFFSETS, 2))
        since, until = sorted(pick.sample(TIMES, 2))
        want = sorted(
            (p, o)
            for p in partitions
            for o in varied.read(
                "d",
                partitions=[p],
                start_offset=first,
                end_offset=end,
                time_start=BASE_MS + since,
                time_end=BASE_MS + until,
            )
            .to_table()
            .column("offset")
            .to_pylist()
        )
        where = (
            f"`partition` IN ({', '.join(map(str, partitions))}) AND `offset` >= {first}"
            f" AND `offset` < {end} AND `timestamp` >= {at(since)} AND `timestamp` < {at(until)}"
        )
        got = sorted((r.partition, r.offset) for r in df.where(where).collect())
        assert got == want, where


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        # Avro promotes string to bytes: both read as binary.
        (pa.array(["x", None]), pa.array([b"\x00\xff", b"y"])),
        (pa.array(["x", None], pa.large_string()), pa.array([b"\x00\xff", b"y"])),
        (pa.array([Decimal("1.25"), None], pa.decimal128(10, 2)), pa.array([0.5, 2.0])),
        (
            pa.array([1.5, None], pa.float32()),
            pa.array([Decimal("-3.75"), None], pa.decimal128(10, 2)),
        ),
        (pa.array([2**64 - 1, 3], pa.uint64()), pa.array([0.5, 1.5])),
        (
            pa.array([{"v": 2**53 + 1}, None], pa.struct([("v", pa.int64())])),
            pa.array([{"v": 0.5}, {"v": None}], pa.struct([("v", pa.float64())])),
        ),
        (pa.array([[2**64 - 1], None], pa.list_(pa.uint64())), pa.array([[-1], []])),
        (
            pa.array([2**63 - 1, -(2**63)], pa.int64()),
            pa.array([Decimal("-123.45"), None], pa.decimal128(5, 2)),
        ),
        (
            pa.array([Decimal("999.99"), None], pa.decimal128(5, 2)),
            pa.array([2**64 - 1, 0], pa.uint64()),
        ),
        (pa.array([255, 0], pa.uint8()), pa.array([Decimal("-1.5"), None], pa.decimal128(2, 1))),
        (
            pa.array([2**63 - 1, None], pa.int64()),
            pa.array(
                [Decimal("1.00000000000000000005"), Decimal("-1.00000000000000000005")],
                pa.decimal128(38, 20),
            ),
        ),
        (
            pa.array([{"v": 2**63 - 1}, None], pa.struct([("v", pa.int64())])),
            pa.array(
                [{"v": Decimal("0.01")}, {"v": None}], pa.struct([("v", pa.decimal128(3, 2))])
            ),
        ),
    ],
    ids=[
        "string-binary",
        "large-string-binary",
        "decimal-double",
        "float-decimal",
        "uint64-double",
        "nested-long-double",
        "nested-uint64-long",
        "int64-decimal",
        "decimal-uint64",
        "uint8-decimal",
        "int64-decimal-past-38-digits",
        "nested-int64-decimal",
    ],
)
def test_a_column_the_store_merges_across_segments_loads_in_spark(
    spark: SparkSession, tmp_path: Path, older: pa.Array, newer: pa.Array
) -> None:
    """A column stored as one type and then another that the store's reader merges (Arrow's
    promotion) reads through the connector as the same type and values, filtered or not;
    the connector refused to load such topics."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "m", 0, [batch(range(2), extra={"x": older})], roll_rows=2)
    write_segments(store, "m", 0, [batch(range(2, 4), extra={"x": newer})], roll_rows=2)
    want = store.read("m").to_table().column("x")
    df = load(spark, store, "m")
    assert (
        df.schema["x"].dataType == spark.createDataFrame(pa.table({"x": want})).schema["x"].dataType
    )

    def value(x: object) -> object:
        if isinstance(x, bytearray):
            return bytes(x)
        return x.asDict(recursive=True) if isinstance(x, Row) else x

    def values(frame: DataFrame) -> list[object]:
        return [value(r.x) for r in frame.collect()]

    got = values(df.orderBy("offset").select("x"))
    assert got == want.to_pylist()
    assert values(df.where("`offset` IN (1, 2)").orderBy("offset")) == got[1:3]
    store.close()


def stop_after_a_commit(query: StreamingQuery, checkpoint: Path) -> None:
    """Stop `query` once it has committed a batch. Spark refuses to restart a checkpoint
    with no committed batch whose first offsets write a stop interrupted (its
    STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), which is Spark's rule, not the source's."""
    deadline = time.monotonic() + 120
    while not any((checkpoint / "commits").glob("[0-9]*")):
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, "the stream committed no batch in 120 s"
        time.sleep(0.05)
    query.stop()


def test_a_stream_reads_each_row_once_while_segments_are_added_and_consolidated(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A stream runs on a short trigger while segments of three partitions are sealed (with
    offset gaps) and consolidated under it, and is stopped mid-way and restarted from its
    checkpoint with another read limit: the sink ends with every row exactly once."""
    store = Store.open(tmp_path / "data")
    pick = random.Random(4)
    next_offset = {0: 0, 1: 0, 2: 0}
    written: list[tuple[int, int]] = []

    def seal(partition: int) -> None:
        n = pick.randrange(3, 30)
        offsets = range(next_offset[partition], next_offset[partition] + n)
        data = batch(offsets, times=[BASE_MS + o for o in offsets])
        write_segments(store, "s", partition, [data], roll_rows=n)
        next_offset[partition] += n + pick.choice([0, 0, 2])
        written.extend((partition, o) for o in offsets)

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(**limit: str) -> StreamingQuery:
        reader = (
            spark.readStream.format("plateau")
            .option("path", str(store.data_dir))
            .option("topic", "s")
            .options(**limit)
        )
        return (
            reader.load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="50 milliseconds")
            .start()
        )

    seal(0)
    seal(1)
    limits = [{"maxRecordsPerTrigger": "17"}, {"maxSegmentsPerTrigger": "1"}, {}]
    query = start(**limits[0])
    for step in range(24):
        seal(pick.randrange(3))
        if step % 3 == 2:
            policy = ConsolidatePolicy(target_bytes=pick.choice([2000, 5000, 1 << 30]), min_age_s=0)
            Consolidator(store, {"s": policy}, fsync=False).run()
        if step % 8 == 7:
            stop_after_a_commit(query, checkpoint)
            query = start(**limits[(step // 8 + 1) % len(limits)])
    query.processAllAvailable()
    query.stop()
    assert query.exception() is None
    landed = [(r.partition, r.offset) for r in spark.read.parquet(str(out)).collect()]
    assert sorted(landed) == sorted(written)
    store.close()


CLASHING = [
    pa.array(["ann", None, "line\nbreak \x01 é 🙂"]),
    pa.array([42, None, -(2**63)]),
    pa.array([2**64 - 1, 0, None], pa.uint64()),
    pa.array([True, False, None]),
    pa.array([1.0, 1e16, 1e-5]),
    pa.array([0.1, -0.0, 5e-324], pa.float32()),
    pa.array([123456789.123, 1.7976931348623157e308, float("nan")]),
    pa.array([Decimal("1.50"), Decimal("-0.01"), None], pa.decimal128(10, 2)),
    pa.array([b"\x00\x01", b"", None]),
    pa.array([0, -1, 19_000], pa.date32()),
    pa.array([0, 1_700_000_000_123, -1], pa.timestamp("ms", tz="UTC")),
    pa.array([0, 1_500, 253_402_300_799], pa.timestamp("s")),
    pa.array(
        [{"id": 7, "tags": ["a", 'q"u\\ote'], "at": 0}, None, {"id": None, "tags": [], "at": 1}],
        pa.struct(
            [("id", pa.int64()), ("tags", pa.list_(pa.string())), ("at", pa.timestamp("us"))]
        ),
    ),
    pa.array([[1.5, None], [], None], pa.list_(pa.float64())),
    pa.array([[("k", 1), ("l\t\x01é", None)], [], None], pa.map_(pa.string(), pa.int32())),
]


def test_a_column_whose_stored_types_clash_reads_as_the_readers_json_text(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two workers each inferring a JSON field's type can store it as text in one partition
    and as a number in another: the connector refused to load the topic, as the reader refused
    to read it. Both read it as a string column, the other types' values as the same JSON
    text, and a filter on it finds the values of every segment, bloom filters or not."""
    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        for partition, column in enumerate(CLASHING):
            policy = IndexPolicy(bloom=("user",))
            writer.acquire("c", partition, roll=RollPolicy(max_age_s=3600), index=policy)
            writer.append("c", partition, batch(range(len(column)), extra={"user": column}))
        writer.flush()
    finally:
        writer.close()
    want = [
        (p, o, v)
        for p in range(len(CLASHING))
        for o, v in enumerate(store.read("c", partitions=[p]).to_table().column("user").to_pylist())
    ]
    assert want[6:9] == [(2, 0, "18446744073709551615"), (2, 1, "0"), (2, 2, None)]
    for pushdown in ("true", "false"):
        df = load(spark, store, "c", pushdown=pushdown)
        assert df.schema["user"].dataType.simpleString() == "string"
        got = sorted(
            (r.partition, r.offset, r.user)
            for r in df.select("partition", "offset", "user").collect()
        )
        assert got == want
        for value in (
            "42",
            "AAE=",
            "ann",
            '{"id":7,"tags":["a","q\\"u\\\\ote"],"at":"1970-01-01T00:00:00.000000"}',
        ):
            found = df.where(df.user == value).select("partition", "offset").collect()
            assert sorted((r.partition, r.offset) for r in found) == [
                (p, o) for p, o, v in want if v == value
            ], value
    store.close()


def test_a_column_planned_as_text_reads_a_type_sealed_since_as_text(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A DataFrame loaded while the column was only text meets a segment sealed since that
    holds it as a number: a new load reads it as text (the types clash), and so does the
    DataFrame already loaded, instead of failing the query."""
    store = Store.open(tmp_path / "data")
    write_segments(store, "c", 0, [batch(range(2), extra={"user": pa.array(["a", "b"])})], 2)
    df = load(spark, store, "c")
    write_segments(store, "c", 1, [batch(range(2), extra={"user": pa.array([1, 2])})], 2)
    assert sorted(r.user for r in df.select("user").collect()) == ["1", "2", "a", "b"]
    assert sorted(r.user for r in load(spark, store, "c").select("user").collect()) == [
        "1",
        "2",
        "a",
        "b",
    ]
    store.close()
