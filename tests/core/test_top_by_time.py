"""Reads in timestamp order (`order_by="timestamp"`): newest first across partitions, and
only the segments a limit needs are opened."""

from __future__ import annotations

import pyarrow as pa
import pytest

from plateau_core import InvalidInputError, RollPolicy, Store, WriterPolicy
from tests.support import BASE_MS, append_patiently, batch

MINUTE_MS = 60_000


@pytest.fixture
def two_partitions(store: Store) -> Store:
    """Partitions 0 and 1, ten 100-row segments each; segment i of partition p spans minute
    2i + p, so the partitions' segments interleave in time."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        for p in (0, 1):
            writer.acquire("t", p, roll=RollPolicy(max_rows=100, max_age_s=3600))
            for i in range(10):
                offsets = range(i * 100, (i + 1) * 100)
                times = [BASE_MS + (2 * i + p) * MINUTE_MS + j for j in range(100)]
                append_patiently(writer, "t", p, batch(offsets, times=times))
        writer.flush()
    finally:
        writer.close()
    return store


def _times(result: object) -> list[int]:
    table = result.to_table()  # type: ignore[attr-defined]
    return table.column("timestamp").cast(pa.int64()).to_pylist()


def test_newest_rows_come_from_the_newest_segment_only(two_partitions: Store) -> None:
    result = two_partitions.read("t", order_by="timestamp", order="desc", limit=100)
    newest = BASE_MS + 19 * MINUTE_MS
    assert _times(result) == [newest + j for j in range(99, -1, -1)]
    assert result.opened == ["topics/t/1/00000000000000000900.arrow"]


def test_a_limit_across_partitions_opens_the_segments_it_needs(two_partitions: Store) -> None:
    result = two_partitions.read("t", order_by="timestamp", order="desc", limit=150)
    times = _times(result)
    assert times == sorted(times, reverse=True) and len(times) == 150
    assert times[-1] == BASE_MS + 18 * MINUTE_MS + 50
    assert sorted(result.opened) == [
        "topics/t/0/00000000000000000900.arrow",
        "topics/t/1/00000000000000000900.arrow",
    ]


def test_oldest_first_and_no_limit(two_partitions: Store) -> None:
    oldest = two_partitions.read("t", order_by="timestamp", order="asc", limit=3)
    assert _times(oldest) == [BASE_MS, BASE_MS + 1, BASE_MS + 2]
    assert oldest.opened == ["topics/t/0/00000000000000000000.arrow"]
    everything = _times(two_partitions.read("t", order_by="timestamp", order="desc"))
    assert len(everything) == 2000 and everything == sorted(everything, reverse=True)


def test_with_filters_and_a_projection(two_partitions: Store) -> None:
    result = two_partitions.read(
        "t",
        order_by="timestamp",
        order="desc",
        limit=5,
        time_end=BASE_MS + 4 * MINUTE_MS,
        columns=["offset"],
    )
    table = result.to_table()
    assert table.column_names == ["offset"]
    assert table.column("offset").to_pylist() == [199, 198, 197, 196, 195]  # minute 3: p1, i=1
    assert result.opened == ["topics/t/1/00000000000000000100.arrow"]
    assert two_partitions.read("t", order_by="timestamp", limit=0).to_table().num_rows == 0


def test_bad_order_by_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInputError, match="order_by must be"):
        store.read("t", order_by="key")  # type: ignore[arg-type]


def test_a_column_widened_after_planning_keeps_the_result_schema(store: Store) -> None:
    """A writer may record a schema widening a column between planning a read and
    iterating it: the rows still come in the schema the result announced."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        append_patiently(writer, "t", 0, batch([0, 1], extra={"n": pa.array([1, 2])}))
        writer.flush()
        result = store.read("t", order_by="timestamp", order="desc", limit=1)
        append_patiently(writer, "t", 0, batch([2], extra={"n": pa.array([1.5])}))
        writer.flush()
    finally:
        writer.close()
    table = result.to_table()
    assert table.schema == result.schema
    assert table.column("n").to_pylist() == [2]
