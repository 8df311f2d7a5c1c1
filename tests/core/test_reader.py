"""The reader: the manifest decides which files are opened; results keep one merged schema."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from plateau_core import InvalidInputError, RollPolicy, Store, WriterPolicy
from plateau_core.policies import IndexPolicy
from plateau_core.read_request import to_epoch_ms
from plateau_core.segment_file import open_segment, read_batch_index
from tests.support import BASE_MS, append_patiently, batch

MINUTE_MS = 60_000


@pytest.fixture
def ten_segments(store: Store) -> Store:
    """Partition 0: ten segments of 100 rows; segment i spans minute i."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_rows=100, max_age_s=3600))
        for i in range(10):
            offsets = range(i * 100, (i + 1) * 100)
            times = [BASE_MS + i * MINUTE_MS + j for j in range(100)]
            append_patiently(writer, "t", 0, batch(offsets, times=times))
        writer.flush()
    finally:
        writer.close()
    return store


def _name(start: int) -> str:
    return f"topics/t/0/{start:020d}.arrow"


def test_time_range_opens_only_overlapping_segments(ten_segments: Store) -> None:
    result = ten_segments.read(
        "t", time_start=BASE_MS + 3 * MINUTE_MS + 50, time_end=BASE_MS + 4 * MINUTE_MS + 10
    )
    table = result.to_table()
    assert result.opened == [_name(300), _name(400)]
    assert table.column("offset").to_pylist() == list(range(350, 410))


def test_offset_range_opens_only_overlapping_segments(ten_segments: Store) -> None:
    result = ten_segments.read("t", start_offset=250, end_offset=300)
    assert result.to_table().column("offset").to_pylist() == list(range(250, 300))
    assert result.opened == [_name(200)]


def test_datetime_bounds(ten_segments: Store) -> None:
    start = datetime.fromtimestamp((BASE_MS + 9 * MINUTE_MS) / 1000, tz=UTC)
    result = ten_segments.read("t", time_start=start.replace(tzinfo=None))
    assert result.to_table().num_rows == 100
    assert result.opened == [_name(900)]


def test_desc_with_limit_reads_the_newest_segment_only(ten_segments: Store) -> None:
    result = ten_segments.read("t", order="desc", limit=30)
    assert result.to_table().column("offset").to_pylist() == list(range(999, 969, -1))
    assert result.opened == [_name(900)]


def test_asc_with_limit_stops_early(ten_segments: Store) -> None:
    result = ten_segments.read("t", limit=150)
    assert result.to_table().column("offset").to_pylist() == list(range(150))
    assert result.opened == [_name(0), _name(100)]


def test_columns_are_projected(ten_segments: Store) -> None:
    table = ten_segments.read("t", columns=["value", "offset"], limit=3).to_table()
    assert table.schema.names == ["value", "offset"]
    with pytest.raises(InvalidInputError, match=r"no column\(s\) \['nope'\]"):
        ten_segments.read("t", columns=["nope"])


def test_schema_evolution_merges_and_widens(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.append("t", 0, batch([0], extra={"n": pa.array([1], pa.int32())}))
        writer.flush()
        writer.append("t", 0, batch([1], extra={"n": pa.array([2**40], pa.int64())}))
        writer.flush()
        writer.append("t", 0, batch([2], extra={"s": pa.array(["x"])}))
        writer.flush()
    finally:
        writer.close()
    table = store.read("t").to_table()
    assert table.schema.field("n").type == pa.int64()
    assert table.column("n").to_pylist() == [1, 2**40, None]
    assert table.column("s").to_pylist() == [None, None, "x"]
    assert len(store.manifest.schemas("t")) == 3


def test_where_on_a_widened_column_reads_every_segment_as_the_merged_type(store: Store) -> None:
    """int32 in an older segment, double in a newer one: a fraction finds nothing in the
    int32 segment instead of refusing to compare with it."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        for offset, column in ((0, pa.array([1], pa.int32())), (1, pa.array([1.5]))):
            writer.append("t", 0, batch([offset], extra={"x": column}))
            writer.flush()
    finally:
        writer.close()
    assert store.read("t", where={"x": 1.5}).to_table().column("offset").to_pylist() == [1]
    assert store.read("t", where={"x": 1}).to_table().column("offset").to_pylist() == [0]
    with pytest.raises(InvalidInputError, match="cannot be compared"):
        store.read("t", where={"x": "one"}).to_table()


def test_integers_beyond_2_53_read_as_the_double_a_column_was_widened_to(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        for offset, column in ((0, pa.array([2**53 + 1, -(2**63)])), (2, pa.array([1.5]))):
            writer.append("t", 0, batch([offset, offset + 1][: len(column)], extra={"x": column}))
            writer.flush()
    finally:
        writer.close()
    for order_by in ("offset", "timestamp"):
        table = store.read("t", order_by=order_by).to_table()  # type: ignore[arg-type]
        assert table.schema.field("x").type == pa.float64()
        assert sorted(table.column("x").to_pylist()) == [-(2.0**63), 1.5, 2.0**53]
    found = store.read("t", where={"x": 2**53 + 1}).to_table()
    assert found.column("x").to_pylist() == [2.0**53]


def test_uint64_beside_a_signed_integer_reads_as_a_decimal_that_holds_both(store: Store) -> None:
    """Arrow merges the two to int64, which cannot hold the values above 2**63 - 1: the read
    failed on the first one. decimal(20, 0) holds both, as the Spark connector reads it."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        for offset, column in ((0, pa.array([2**64 - 1], pa.uint64())), (1, pa.array([-1]))):
            writer.append("t", 0, batch([offset], extra={"x": column}))
            writer.flush()
    finally:
        writer.close()
    for order_by in ("offset", "timestamp"):
        table = store.read("t", order_by=order_by).to_table()  # type: ignore[arg-type]
        assert table.schema.field("x").type == pa.decimal128(20, 0)
        assert sorted(table.column("x").to_pylist()) == [-1, 2**64 - 1]
    found = store.read("t", where={"x": 2**64 - 1}).to_table()
    assert found.column("offset").to_pylist() == [0]


def _column_in_segments(store: Store, columns: list[pa.Array]) -> None:
    """Column `x` of topic `t` stored as `columns[i]` in the i-th segment of partition 0."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        start = 0
        for column in columns:
            writer.append("t", 0, batch(range(start, start + len(column)), extra={"x": column}))
            writer.flush()
            start += len(column)
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("integers", "merged"),
    [
        (pa.array([2**63 - 1, -(2**63)], pa.int64()), pa.decimal128(21, 2)),
        (pa.array([2**64 - 1, 0], pa.uint64()), pa.decimal128(22, 2)),
        (pa.array([2**31 - 1, -(2**31)], pa.int32()), pa.decimal128(12, 2)),
        (pa.array([2**32 - 1, 0], pa.uint32()), pa.decimal128(21, 2)),
        (pa.array([255, 0], pa.uint8()), pa.decimal128(7, 2)),
    ],
)
def test_integers_beside_a_decimal_read_as_one_that_holds_their_extremes(
    store: Store, integers: pa.Array, merged: pa.DataType
) -> None:
    """Arrow merged int64 beside decimal(5, 2) to decimal(20, 2): every read of the topic
    failed on int64's extremes. The precision covers the integer's digits (an unsigned one
    those of the type Spark reads it as) and the decimal's places."""
    _column_in_segments(store, [integers, pa.array([Decimal("-123.45")], pa.decimal128(5, 2))])
    for order_by in ("offset", "timestamp"):
        table = store.read("t", order_by=order_by).to_table()  # type: ignore[arg-type]
        assert table.schema.field("x").type == merged
        assert sorted(table.column("x").to_pylist()) == sorted(
            [Decimal("-123.45"), *integers.to_pylist()]
        )
    top = max(integers.to_pylist())
    assert store.read("t", where={"x": top}).to_table().column("x").to_pylist() == [top]


def test_a_decimal_past_38_digits_beside_integers_keeps_their_digits(store: Store) -> None:
    """int64 beside decimal(38, 20) needs 39 digits: the places give way (decimal(38, 19)),
    a value with more read rounded half away from zero, as Spark rounds it."""
    places = [Decimal("1.00000000000000000005"), Decimal("-1.00000000000000000005")]
    _column_in_segments(
        store, [pa.array([2**63 - 1], pa.int64()), pa.array(places, pa.decimal128(38, 20))]
    )
    table = store.read("t").to_table()
    assert table.schema.field("x").type == pa.decimal128(38, 19)
    assert table.column("x").to_pylist() == [
        Decimal(2**63 - 1),
        Decimal("1.0000000000000000001"),
        Decimal("-1.0000000000000000001"),
    ]


def test_nested_integers_read_as_the_types_a_topic_widened_them_to(store: Store) -> None:
    """Inside a struct, list or map the same widening as in a column: integers beyond 2**53
    beside a double, and uint64 beside a signed integer. Every read of such a topic failed
    on the first of them."""
    big, unsigned = 2**53 + 1, 2**64 - 1

    def struct(value: object, dtype: pa.DataType) -> pa.Array:
        return pa.array([{"v": value}], pa.struct([("v", dtype)]))

    def lists(value: object, dtype: pa.DataType) -> pa.Array:
        return pa.array([[value]], pa.list_(dtype))

    def mapped(value: object, dtype: pa.DataType) -> pa.Array:
        return pa.array([[("k", value)]], pa.map_(pa.string(), dtype))

    segments = [
        {"s": struct(big, pa.int64()), "l": lists(big, pa.int64()), "m": mapped(big, pa.int64())},
        {
            "s": struct(0.5, pa.float64()),
            "l": lists(0.5, pa.float64()),
            "m": mapped(0.5, pa.float64()),
        },
        {"us": struct(unsigned, pa.uint64()), "ul": lists(unsigned, pa.uint64())},
        {"us": struct(-1, pa.int64()), "ul": lists(-1, pa.int64())},
    ]
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        for offset, extra in enumerate(segments):
            writer.append("t", 0, batch([offset], extra=extra))
            writer.flush()
    finally:
        writer.close()
    for order_by in ("offset", "timestamp"):
        table = store.read("t", order_by=order_by).to_table()  # type: ignore[arg-type]
        assert table.schema.field("us").type == pa.struct([("v", pa.decimal128(20, 0))])
        rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
        assert [(r["s"], r["l"], r["m"]) for r in rows[:2]] == [
            ({"v": float(big)}, [float(big)], [("k", float(big))]),
            ({"v": 0.5}, [0.5], [("k", 0.5)]),
        ]
        assert [(r["us"], r["ul"]) for r in rows[2:]] == [
            ({"v": unsigned}, [unsigned]),
            ({"v": -1}, [-1]),
        ]


def _clashing(store: Store, columns: list[dict[str, pa.Array]], index: bool = False) -> None:
    """One segment per entry, each in its own partition, as workers that each inferred a
    JSON field's type write them."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        for partition, extra in enumerate(columns):
            rows = len(next(iter(extra.values())))
            policy = IndexPolicy(bloom=tuple(extra)) if index else None
            writer.acquire("t", partition, roll=RollPolicy(max_age_s=3600), index=policy)
            writer.append("t", partition, batch(range(rows), extra=extra))
        writer.flush()
    finally:
        writer.close()


def test_a_column_whose_types_clash_reads_as_json_text(store: Store) -> None:
    """Two workers each inferring a JSON field's type can store it as text in one partition
    and as a number in another: every read of the topic failed. The column reads as text, the
    other types' values as their JSON text, with one warning naming the column."""
    _clashing(
        store,
        [
            {"user": pa.array(["ann", None]), "n": pa.array([1, 2])},
            {"user": pa.array([42, None]), "n": pa.array(["x", "y"])},
            {"user": pa.array([True, False])},
            {"user": pa.array([1.0, 2.5e-7])},
            {"user": pa.array([{"id": 7, "tags": ["a", 'q"uote']}, None])},
            {"user": pa.array([[1, None], []])},
            {"user": pa.array([0, 1_500], pa.timestamp("s"))},
        ],
    )
    with capture_logs() as logs:
        table = store.read("t").to_table()
    assert table.schema.field("user").type == pa.string()
    assert table.schema.field("n").type == pa.string()
    users = [
        tuple(store.read("t", partitions=[p]).to_table().column("user").to_pylist())
        for p in range(7)
    ]
    assert users == [
        ("ann", None),
        ("42", None),
        ("true", "false"),
        ("1.0", "2.5e-07"),
        ('{"id":7,"tags":["a","q\\"uote"]}', None),
        ("[1,null]", "[]"),
        ("1970-01-01T00:00:00", "1970-01-01T00:25:00"),
    ]
    assert table.column("user").to_pylist() == [v for pair in users for v in pair]
    clashes = {e["column"]: e for e in logs if e["event"] == "column_types_clash"}
    assert sorted(clashes) == ["n", "user"] and len(logs) == 2
    assert (clashes["n"]["topic"], clashes["n"]["types"]) == ("t", ["int64", "string"])
    ordered = store.read("t", order_by="timestamp", columns=["user"]).to_table()
    assert sorted(v for v in ordered.column("user").to_pylist() if v) == sorted(
        v for v in table.column("user").to_pylist() if v
    )


def test_a_filter_on_a_clashed_column_finds_the_values_of_every_type(store: Store) -> None:
    """`where` compares the text the column reads as, in every segment; the statistics and
    bloom filters of the stored types prune no segment for it (those of bytes stored as such
    ruled out the segment whose b"\\x00\\x01" reads as "AAE=")."""
    _clashing(
        store,
        [
            {"user": pa.array(["ann", "42"])},
            {"user": pa.array([42, 7])},
            {"user": pa.array([b"\x00\x01", b"\x02"])},
        ],
        index=True,
    )
    for value in ("42", 42):
        result = store.read("t", where={"user": value})
        assert sorted(result.to_table().column("user").to_pylist()) == ["42", "42"]
    found = store.read("t", where={"user": "AAE="})
    assert found.to_table().column("user").to_pylist() == ["AAE="]
    assert found.pruned == 0
    assert store.read("t", where={"user": "ann"}).to_table().num_rows == 1


def test_a_filter_on_a_clashed_column_finds_a_value_stored_in_its_own_type(
    store: Store,
) -> None:
    """A double stored as such reads as its JSON text ("1.0"), bytes as base64: `where`
    with the number or the bytes finds the rows holding them, as it does without a clash."""
    _clashing(
        store,
        [
            {"user": pa.array(["ann", "1"])},
            {"user": pa.array([1.0, 2.5])},
            {"user": pa.array([b"\xff\x01", b"ann"])},
        ],
        index=True,
    )

    def found(value: object) -> list[str]:
        return sorted(store.read("t", where={"user": value}).to_table().column("user").to_pylist())

    assert found(2.5) == ["2.5"]
    assert found(1.0) == ["1", "1.0"]
    assert found(1) == ["1", "1.0"]
    assert found(b"\xff\x01") == ["/wE="]
    assert found(b"ann") == ["YW5u", "ann"]
    assert found(True) == []


def test_spans_describe_partitions(ten_segments: Store) -> None:
    [span] = ten_segments.spans("t")
    assert (span.partition, span.next_offset, span.segments, span.records) == (0, 1000, 10, 1000)
    assert span.time_min == BASE_MS
    assert span.time_max == BASE_MS + 9 * MINUTE_MS + 99
    assert span.bytes == sum(s.size_bytes for s in ten_segments.manifest.segments("t"))
    assert ten_segments.topics() == ["t"]
    # What retention watches: the same bytes and count, without a row per partition.
    assert ten_segments.manifest.topic_totals() == {"t": (span.bytes, 10)}
    ten_segments.manifest.mark_deleting([ten_segments.manifest.segments("t")[0].id], at=0)
    size, count = ten_segments.manifest.topic_totals()["t"]
    assert (count, size < span.bytes) == (9, True)


def test_unknown_topic_reads_empty(store: Store) -> None:
    result = store.read("nothing-here")
    assert result.to_table().num_rows == 0
    assert result.opened == []


def test_a_column_of_older_segments_stays_selectable(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.append("t", 0, batch([0]))
        writer.flush()
        writer.append("t", 0, batch([1]).drop_columns(["key"]))
        writer.flush()
    finally:
        writer.close()
    # Only the newer segment is selected, yet `key` is a column of the topic: it reads as null.
    result = store.read("t", start_offset=1, columns=["offset", "key"])
    assert result.to_table().to_pylist() == [{"offset": 1, "key": None}]
    assert result.opened == ["topics/t/0/00000000000000000001.arrow"]


def test_batches_inside_a_segment_are_skipped_by_their_index(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        for i in range(10):  # one segment of ten 5000-row batches, minute i each
            offsets = range(i * 5000, (i + 1) * 5000)
            times = [BASE_MS + i * MINUTE_MS + j for j in range(5000)]
            append_patiently(writer, "t", 0, batch(offsets, times=times))
        writer.flush()
    finally:
        writer.close()
    assert len(store.manifest.segments("t")) == 1
    result = store.read("t", time_start=BASE_MS + 4 * MINUTE_MS, time_end=BASE_MS + 5 * MINUTE_MS)
    assert result.to_table().column("offset").to_pylist() == list(range(20_000, 25_000))
    assert (result.batches_read, result.batches_skipped) == (1, 9)
    by_offset = store.read("t", start_offset=49_999)
    assert by_offset.to_table().num_rows == 1
    assert by_offset.batches_read == 1


def test_many_small_appends_are_regrouped_in_the_segment(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        for start in range(0, 3000, 3):
            writer.append("t", 0, batch(range(start, start + 3)))
        writer.flush()
    finally:
        writer.close()
    [segment] = store.manifest.segments("t")
    reader = open_segment(store.segment_path(segment))
    assert reader.num_record_batches == 1
    assert read_batch_index(reader) == [(0, 2999, BASE_MS, BASE_MS + 2999)]


def test_datetime_bounds_between_two_milliseconds_keep_the_rows_inside_them(
    ten_segments: Store,
) -> None:
    """Timestamps are whole milliseconds: a bound at 5.5 ms starts after the row at 5 ms
    and ends after it, whichever side of the epoch."""
    between = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=BASE_MS + 5.5)
    after = ten_segments.read("t", time_start=between, end_offset=10).to_table()
    assert after.column("offset").to_pylist() == [6, 7, 8, 9]
    before = ten_segments.read("t", time_end=between, end_offset=10).to_table()
    assert before.column("offset").to_pylist() == [0, 1, 2, 3, 4, 5]
    assert to_epoch_ms(datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC), "t") == 0
    assert to_epoch_ms(datetime(1969, 12, 31, 23, 59, 59, 998_000), "t") == -2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"start_offset": 0.5}, "start_offset must be an integer offset, got 0.5"),
        ({"end_offset": "10"}, "end_offset must be an integer offset"),
        ({"end_offset": 2**64}, "end_offset must fit in 64 bits"),
        ({"time_end": 2**64}, "time_end must fit in 64 bits"),
        ({"time_start": True}, "time_start must be a datetime or epoch milliseconds"),
        ({"partitions": 0}, "partitions must be a list of partition numbers, got 0"),
        ({"partitions": [0.0]}, "partitions must be a list"),
        ({"columns": "offset"}, "columns must be a list of column names, got 'offset'"),
        ({"limit": 1.5}, "limit must be a non-negative integer, got 1.5"),
        ({"limit": -1}, "limit must be a non-negative integer"),
    ],
)
def test_bad_read_arguments_are_named(
    ten_segments: Store, arguments: dict[str, object], message: str
) -> None:
    """Each was an error of the database or of Python (a float offset even a wrong answer:
    start_offset=0.5 returned offset 0, and columns="offset" was read as its letters)."""
    with pytest.raises(InvalidInputError, match=message):
        ten_segments.read("t", **arguments).to_table()  # type: ignore[arg-type]


def test_numpy_integers_are_good_read_arguments(ten_segments: Store) -> None:
    result = ten_segments.read(
        "t",
        partitions=[np.int64(0)],  # type: ignore[list-item]
        start_offset=np.int64(5),  # type: ignore[arg-type]
        end_offset=np.int32(8),  # type: ignore[arg-type]
        time_start=np.int64(BASE_MS),  # type: ignore[arg-type]
        limit=np.int64(2),  # type: ignore[arg-type]
    )
    assert result.to_table().column("offset").to_pylist() == [5, 6]
