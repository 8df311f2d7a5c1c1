"""A data column stored as timestamps of different zones (or none) and units in different
segments reads as one timestamp column in UTC, and `where` finds its rows in every segment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from plateau_core import InvalidInputError, RollPolicy, Store, WriterPolicy
from plateau_core.conform import UnrepresentableValueError
from tests.support import batch

MS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z


@pytest.fixture
def mixed(tmp_path: Path) -> Iterator[Store]:
    """Topic `t`: `at` naive in microseconds in partition 0, in milliseconds in Paris time in
    partition 1 (the same instant in each first row), in seconds in UTC in partition 2."""
    store = Store.open(tmp_path / "data")
    columns = [
        pa.array([MS * 1000, MS * 1000 + 1, None], pa.timestamp("us")),
        pa.array([MS, MS + 1], pa.timestamp("ms", tz="Europe/Paris")),
        pa.array([MS // 1000], pa.timestamp("s", tz="UTC")),
    ]
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        for partition, column in enumerate(columns):
            writer.acquire("t", partition, roll=RollPolicy(max_age_s=3600))
            writer.append("t", partition, batch(range(len(column)), extra={"at": column}))
        writer.flush()
    finally:
        writer.close()
    try:
        yield store
    finally:
        store.close()


def found(store: Store, value: object) -> list[tuple[int, int]]:
    """(epoch microseconds, offset) of the rows `where at = value` keeps, sorted."""
    table = store.read("t", where={"at": value}, columns=["offset", "at"]).to_table()
    micros = table.column("at").cast(pa.int64()).to_pylist()
    return sorted(zip(micros, table.column("offset").to_pylist(), strict=True))


def test_the_column_reads_in_utc_in_the_finest_unit(mixed: Store) -> None:
    table = mixed.read("t", order_by="timestamp").to_table()
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert sorted(table.column("at").cast(pa.int64()).to_pylist(), key=str) == sorted(
        [MS * 1000, MS * 1000 + 1, None, MS * 1000, MS * 1000 + 1000, MS // 1000 * 10**6],
        key=str,
    )


@pytest.mark.parametrize(
    "value",
    [
        "2023-11-14T22:13:20.123Z",
        "2023-11-14T23:13:20.123+01:00",
        "2023-11-14T22:13:20.123",  # naive: UTC, as plateau takes naive times
        "2023-11-14 22:13:20.123000",
        MS * 1000,  # a number: in the column's unit, the finest the topic stores
    ],
)
def test_where_finds_the_instant_in_every_segment_whatever_its_zone_or_unit(
    mixed: Store, value: object
) -> None:
    """Compared as each segment stored the column, text with a zone was refused by the
    naive segment and text without one by the zoned ones, and a number meant microseconds
    in one segment and milliseconds in the other: rows were missed or the read failed."""
    assert found(mixed, value) == [(MS * 1000, 0), (MS * 1000, 0)]


def test_where_finds_a_value_only_the_finer_unit_holds(mixed: Store) -> None:
    assert found(mixed, "2023-11-14T22:13:20.123001Z") == [(MS * 1000 + 1, 1)]
    assert found(mixed, "2023-11-14T22:13:20Z") == [(MS // 1000 * 10**6, 0)]
    assert found(mixed, ["2023-11-14T22:13:20.124Z", "1999-01-01"]) == [(MS * 1000 + 1000, 1)]


def test_where_with_text_that_is_no_time_names_the_column(mixed: Store) -> None:
    with pytest.raises(InvalidInputError, match="where 'at'"):
        mixed.read("t", where={"at": "yesterday"}).to_table()


def test_where_beside_a_clashed_column_finds_the_instant_too(tmp_path: Path) -> None:
    """With a column whose types clash, `where` compares the text of that one and the
    timestamps of this one as the read returns them."""
    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(fsync=False))
    columns = [
        {"at": pa.array([MS * 1000], pa.timestamp("us")), "u": pa.array([1])},
        {"at": pa.array([MS], pa.timestamp("ms", tz="UTC")), "u": pa.array(["1"])},
    ]
    try:
        for partition, extra in enumerate(columns):
            writer.acquire("t", partition, roll=RollPolicy(max_age_s=3600))
            writer.append("t", partition, batch(range(1), extra=extra))
        writer.flush()
    finally:
        writer.close()
    where = {"at": "2023-11-14T22:13:20.123Z", "u": "1"}
    assert store.read("t", where=where).to_table().num_rows == 2
    store.close()


def _store_of(tmp_path: Path, columns: list[pa.Array]) -> Store:
    """Topic `t` with column `at` stored as `columns[p]` in partition p."""
    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        for partition, column in enumerate(columns):
            writer.acquire("t", partition, roll=RollPolicy(max_age_s=3600))
            writer.append("t", partition, batch(range(len(column)), extra={"at": column}))
        writer.flush()
    finally:
        writer.close()
    return store


YEAR_3000_S = 32_503_680_000  # 3000-01-01T00:00:00Z in seconds


@pytest.mark.parametrize("order_by", ["offset", "timestamp"])
def test_seconds_past_2262_beside_nanoseconds_read_in_microseconds(
    tmp_path: Path, order_by: str
) -> None:
    """Merged to nanoseconds, the year 3000 in seconds was out of their range: every read
    of the topic failed. Units that differ merge to the finer one up to microseconds, as
    the connector reads them, nanoseconds floored (before 1970 too)."""
    store = _store_of(
        tmp_path,
        [
            pa.array([YEAR_3000_S, None], pa.timestamp("s", tz="UTC")),
            pa.array([MS * 10**6 + 999, -1500], pa.timestamp("ns", tz="UTC")),
        ],
    )
    table = store.read("t", order_by=order_by).to_table()  # type: ignore[arg-type]
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    micros = table.column("at").cast(pa.int64()).to_pylist()
    assert sorted(micros, key=str) == sorted([YEAR_3000_S * 10**6, None, MS * 1000, -2], key=str)
    assert found(store, "3000-01-01T00:00:00Z") == [(YEAR_3000_S * 10**6, 0)]
    assert found(store, MS * 1000) == [(MS * 1000, 0)]
    store.close()


def test_nanoseconds_in_every_segment_stay_nanoseconds(tmp_path: Path) -> None:
    store = _store_of(
        tmp_path,
        [
            pa.array([MS * 10**6 + 1], pa.timestamp("ns", tz="UTC")),
            pa.array([MS * 10**6 + 2], pa.timestamp("ns")),
        ],
    )
    table = store.read("t").to_table()
    assert table.schema.field("at").type == pa.timestamp("ns", tz="UTC")
    assert sorted(table.column("at").cast(pa.int64()).to_pylist()) == [
        MS * 10**6 + 1,
        MS * 10**6 + 2,
    ]
    store.close()


@pytest.mark.parametrize("where", [None, {"at": "3000-01-01T00:00:00Z"}])
@pytest.mark.parametrize("order_by", ["offset", "timestamp"])
def test_a_value_the_merged_unit_cannot_hold_names_topic_column_and_segment(
    tmp_path: Path, order_by: str, where: dict[str, object] | None
) -> None:
    """Seconds past the year 294247 have no microseconds: the read says where they are."""
    store = _store_of(
        tmp_path,
        [
            pa.array([MS * 1000], pa.timestamp("us", tz="UTC")),
            pa.array([10**13], pa.timestamp("s", tz="UTC")),
        ],
    )
    with pytest.raises(UnrepresentableValueError) as raised:
        store.read("t", order_by=order_by, where=where).to_table()  # type: ignore[arg-type]
    message = str(raised.value)
    assert "topic 't' partition 1, segment" in message
    assert "column 'at'" in message
    assert "topics/t/1/" in message
    store.close()
