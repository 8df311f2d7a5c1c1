"""Spark filters to segment bounds, and the stream's admission under read limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows

from plateau_core.manifest import SegmentRecord, SegmentState
from plateau_spark.source.filters import Range, epoch_micros, push
from plateau_spark.source.stream import _admit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_MS = 1_767_225_600_000


def test_offset_comparisons_become_one_half_open_range() -> None:
    bounds, rejected = push(
        [
            GreaterThan(("offset",), 9),
            LessThanOrEqual(("offset",), 20),
            GreaterThanOrEqual(("offset",), 5),
            IsNotNull(("offset",)),
        ]
    )
    assert rejected == []
    assert bounds.offsets == Range(10, 21)
    request = bounds.request("t")
    assert (request.start_offset, request.end_offset) == (10, 21)


def test_unsupported_filters_go_back_to_spark() -> None:
    others = [
        EqualTo(("value",), b"x"),
        Not(EqualTo(("offset",), 3)),
        IsNull(("offset",)),
        StringStartsWith(("key",), "a"),
        EqualTo(("headers", "key"), "h"),
        LessThan(("offset",), "7"),  # not an int: not understood, not taken
    ]
    bounds, rejected = push(others)
    assert rejected == others
    assert bounds.offsets == Range() and bounds.partitions == Range()


def test_timestamp_literals_map_to_exact_millisecond_bounds() -> None:
    half = T0 + timedelta(microseconds=500)
    assert push([GreaterThan(("timestamp",), T0)])[0].times == Range(T0_MS + 1, None)
    assert push([GreaterThanOrEqual(("timestamp",), half)])[0].times == Range(T0_MS + 1, None)
    assert push([LessThan(("timestamp",), half)])[0].times == Range(None, T0_MS + 1)
    assert push([LessThanOrEqual(("timestamp",), half)])[0].times == Range(None, T0_MS + 1)
    assert push([EqualTo(("timestamp",), T0)])[0].times == Range(T0_MS, T0_MS + 1)
    assert push([EqualTo(("timestamp",), half)])[0].empty
    # Naive datetimes are the process's local time, as Spark makes them.
    naive = datetime.fromtimestamp(T0_MS / 1000)
    assert epoch_micros(naive) == T0_MS * 1000


def test_in_lists_narrow_to_their_exact_values() -> None:
    bounds, _ = push(
        [
            In(("partition",), (1, 3, 5)),
            In(("partition",), (3, 5, 7)),
            In(("timestamp",), (T0, T0 + timedelta(microseconds=1))),
        ]
    )
    assert bounds.partitions.values == frozenset({3, 5})
    assert 3 in bounds.partitions and 1 not in bounds.partitions
    assert bounds.times.settled() == Range(T0_MS, T0_MS + 1, frozenset({T0_MS}))
    empty, _ = push([In(("offset",), (1, 2)), GreaterThan(("offset",), 5)])
    assert empty.offsets.settled().empty


def segment(partition: int, start: int, rows: int, time_min: int) -> SegmentRecord:
    return SegmentRecord(
        id=partition * 1000 + start,
        topic="t",
        partition=partition,
        start_offset=start,
        end_offset=start + rows,
        record_count=rows,
        time_min=time_min,
        time_max=time_min + 10,
        size_bytes=rows * 10,
        path="",
        schema_fingerprint="",
        state=SegmentState.SEALED,
        created_at=0,
        replicated_at=None,
        deleting_at=None,
        problem=None,
    )


def test_read_limits_admit_oldest_partition_heads_first_and_never_nothing() -> None:
    segments = [
        segment(0, 0, 100, time_min=50),
        segment(0, 100, 100, time_min=10),  # older time, but offset order comes first
        segment(1, 0, 100, time_min=20),
        segment(1, 100, 500, time_min=30),
    ]
    assert _admit(segments, ReadAllAvailable()) == segments
    # In time order of the partition heads; the first that does not fit ends the batch.
    chosen = _admit(segments, ReadMaxRows(250))
    assert [(s.partition, s.start_offset) for s in chosen] == [(1, 0)]
    chosen = _admit(segments, ReadMaxRows(700))
    assert [(s.partition, s.start_offset) for s in chosen] == [(1, 0), (1, 100), (0, 0)]
    assert [(s.partition, s.start_offset) for s in _admit(segments, ReadMaxFiles(3))] == [
        (1, 0),
        (1, 100),
        (0, 0),
    ]
    # A segment larger than the limit is still read, alone.
    assert [s.record_count for s in _admit([segments[3]], ReadMaxRows(10))] == [500]
