"""Segments sealed before data fields named like plateau's columns got a `_` suffix: their
`partition` or `Timestamp` column reads as `partition_` or `Timestamp_`, the column newer
segments hold, in every read of the store; a file holding both names is refused, named."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from plateau_core import Store
from plateau_core.consolidate import Consolidator
from plateau_core.errors import InvalidInputError
from plateau_core.policies import ConsolidatePolicy, IndexPolicy
from plateau_core.read_request import ReadRequest
from plateau_core.reader import ScanCounters, SegmentUnavailableError, segment_batches
from plateau_core.schema_merge import merged_schema
from plateau_core.segment_file import open_segment
from plateau_core.stored_names import TwinColumnsError, read_names
from plateau_core.verify import verify_store
from tests.support import BASE_MS, record_segment

TS = pa.timestamp("ms", tz="UTC")
INDEX = IndexPolicy(bloom=("partition_",))


def segment(offsets: Sequence[int], **data: pa.Array) -> pa.Table:
    """A segment's table as the writer lays it out: offset, timestamp, key, value, `data`."""
    return pa.table(
        {
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([BASE_MS + o for o in offsets], TS),
            "key": pa.array([f"k{o}".encode() for o in offsets], pa.binary()),
            "value": pa.array([b"v"] * len(offsets), pa.binary()),
            **data,
        }
    )


def old(offsets: Sequence[int]) -> pa.Table:
    """A segment from before the rule: fields `partition`, `Timestamp` and `KEY` as named."""
    return segment(
        offsets,
        partition=pa.array([o % 3 for o in offsets], pa.int64()),
        Timestamp=pa.array(list(offsets), pa.int32()),
        KEY=pa.array([f"K{o}" for o in offsets]),
    )


def new(offsets: Sequence[int]) -> pa.Table:
    """A segment sealed since: the same fields under their suffixed names."""
    return segment(
        offsets,
        partition_=pa.array([o % 3 for o in offsets], pa.int64()),
        Timestamp_=pa.array(list(offsets), pa.int64()),
        KEY_=pa.array([f"K{o}" for o in offsets]),
    )


def test_names_a_segments_columns_read_as() -> None:
    assert read_names(["offset", "timestamp", "key", "headers", "value"]) == [
        "offset",
        "timestamp",
        "key",
        "headers",
        "value",
    ]
    assert read_names(["offset", "partition", "Partition", "Timestamp", "KEY", "hEaders"]) == [
        "offset",
        "partition_",
        "Partition_",
        "Timestamp_",
        "KEY_",
        "hEaders_",
    ]
    assert read_names(["partition_", "Timestamp_", "n"]) == ["partition_", "Timestamp_", "n"]
    with pytest.raises(TwinColumnsError, match=r"'Timestamp' and 'Timestamp_'"):
        read_names(["offset", "Timestamp", "Timestamp_"])


def test_old_and_new_schemas_merge_into_the_suffixed_columns() -> None:
    merged = merged_schema([old([0]).schema, new([1]).schema]).schema
    assert merged.names == [
        "offset",
        "timestamp",
        "key",
        "value",
        "partition_",
        "Timestamp_",
        "KEY_",
    ]
    assert merged.field("Timestamp_").type == pa.int64()


def test_an_old_segments_columns_read_as_the_suffixed_ones(store: Store) -> None:
    record_segment(store, "t", 0, old(range(10)))
    record_segment(store, "t", 0, new(range(10, 20)), index=INDEX)
    record_segment(store, "t", 1, old(range(100, 105)))

    table = store.read("t").to_table()
    assert table.schema.names == [
        "offset",
        "timestamp",
        "key",
        "value",
        "partition_",
        "Timestamp_",
        "KEY_",
    ]
    assert table.column("partition_").to_pylist() == [o % 3 for o in [*range(20), *range(100, 105)]]
    assert table.column("Timestamp_").to_pylist() == [*range(20), *range(100, 105)]
    assert table.column("KEY_").to_pylist() == [f"K{o}" for o in [*range(20), *range(100, 105)]]

    picked = store.read("t", columns=["Timestamp_"], where={"partition_": 1}).to_table()
    assert picked.schema.names == ["Timestamp_"]
    assert sorted(picked.column("Timestamp_").to_pylist()) == [1, 4, 7, 10, 13, 16, 19, 100, 103]
    newest = store.read("t", order_by="timestamp", order="desc", limit=3, columns=["KEY_"])
    assert newest.to_table().column("KEY_").to_pylist() == ["K104", "K103", "K102"]
    with pytest.raises(InvalidInputError, match="no column"):
        store.read("t", columns=["partition"])


def test_consolidation_rewrites_old_segments_under_the_suffixed_names(store: Store) -> None:
    record_segment(store, "t", 0, old(range(10)))
    record_segment(store, "t", 0, old(range(10, 20)))
    before = store.read("t").to_table()

    policy = ConsolidatePolicy(target_bytes=10**9, min_age_s=0)
    report = Consolidator(store, {"t": policy}, indexes={"t": INDEX}, fsync=False).run()

    assert [(m.start_offset, m.end_offset) for m in report.merged] == [(0, 20)]
    [merged] = store.manifest.segments("t")
    stored = open_segment(store.segment_path(merged)).schema
    assert stored.names == [
        "offset",
        "timestamp",
        "key",
        "value",
        "partition_",
        "Timestamp_",
        "KEY_",
    ]
    assert store.read("t").to_table().equals(before)
    # The bloom filter the topic asks for on `partition_` is built from the old `partition`.
    assert set(store.manifest.blooms("t", ["partition_"])) == {merged.id}
    assert verify_store(store, deep=True).clean


def test_a_segment_holding_both_names_is_refused_naming_it(store: Store) -> None:
    record_segment(store, "t", 0, new(range(10)))
    both = segment(
        range(10, 20),
        partition=pa.array([9] * 10, pa.int64()),
        partition_=pa.array([1] * 10, pa.int64()),
    )
    stats = record_segment(store, "t", 0, both)
    path = f"topics/t/0/{stats.start_offset:020d}.arrow"

    with pytest.raises(TwinColumnsError) as refused:
        store.read("t")
    message = str(refused.value)
    assert "topic 't'" in message
    assert path in message
    assert "'partition' and 'partition_'" in message

    # Reading its file straight (as consolidation and replication do) is refused the same way.
    [twin] = [s for s in store.manifest.segments("t") if s.start_offset == 10]
    policy = ConsolidatePolicy(target_bytes=10**9, min_age_s=0)
    record_segment(store, "t", 0, both.set_column(0, "offset", pa.array(range(20, 30))))
    report = Consolidator(store, {"t": policy}, fsync=False).run()
    assert report.unreadable == 1
    assert report.merged == []
    assert twin in store.manifest.segments("t")


def test_segment_batches_name_the_segment_holding_both(store: Store) -> None:
    both = segment(range(3), Timestamp=pa.array([1, 2, 3]), Timestamp_=pa.array([4, 5, 6]))
    record_segment(store, "t", 0, both)
    [record] = store.manifest.segments("t")
    rows = segment_batches(
        Path(store.segment_path(record)), record, ReadRequest.whole("t"), ScanCounters()
    )
    with pytest.raises(SegmentUnavailableError, match=r"topic 't': segment topics/t/0/0+\.arrow"):
        list(rows)


def test_a_schema_only_retired_segments_had_is_left_out(store: Store) -> None:
    """The manifest keeps a topic's schemas after their segments are gone: a twin schema no
    readable segment has any more must not make the topic unreadable."""
    record_segment(
        store, "t", 0, segment(range(3), KEY=pa.array(["a"] * 3), KEY_=pa.array(["b"] * 3))
    )
    [gone] = store.manifest.segments("t")
    record_segment(store, "t", 0, new(range(3, 6)))
    store.manifest.mark_deleting([gone.id])

    table = store.read("t").to_table()
    assert table.column("KEY_").to_pylist() == ["K3", "K4", "K5"]
