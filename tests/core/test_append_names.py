"""The writer stores a data column named like one of plateau's columns (`partition`,
`Timestamp`, `KEY`) under its `_`-suffixed name, as the decoders do, so what is stored is
what every reader reads; a batch holding such a column and its suffixed twin is refused
before anything of it is buffered, journaled or sealed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from plateau_core import Append, InvalidInputError, RollPolicy, Store, WriterPolicy
from plateau_core.journal import Journal
from plateau_core.journal_files import JOURNAL_DIR
from plateau_core.journal_replay import replay
from plateau_core.policies import IndexPolicy
from plateau_core.schema import fingerprint
from plateau_core.segment_file import open_segment
from plateau_core.slog import Prepared
from plateau_core.stored_names import TwinFieldsError
from tests.support import batch

HOUR = RollPolicy(max_age_s=3600)


def clashing(offsets: range) -> pa.RecordBatch:
    """Data fields named like plateau's columns in other cases, beside its own columns."""
    return batch(
        offsets,
        extra={
            "partition": pa.array([o % 3 for o in offsets], pa.int64()),
            "Timestamp": pa.array([o * 10 for o in offsets], pa.int32()),
            "KEY": pa.array([f"K{o}" for o in offsets]),
        },
    )


def stored_columns(store: Store, topic: str) -> list[list[str]]:
    """The columns of each of the topic's segment files, as written."""
    return [
        open_segment(store.segment_path(s)).schema.names for s in store.manifest.segments(topic)
    ]


@pytest.mark.parametrize("journal", [False, True], ids=["writer", "journaled"])
def test_clashing_data_columns_are_stored_suffixed(store: Store, journal: bool) -> None:
    writer = store.writer(WriterPolicy(fsync=False), journal=journal)
    try:
        writer.acquire("t", 0, roll=HOUR, index=IndexPolicy(bloom=("partition_",)))
        writer.append("t", 0, clashing(range(6)))
        writer.flush()
    finally:
        writer.close()

    expected = ["offset", "timestamp", "key", "value", "partition_", "Timestamp_", "KEY_"]
    assert stored_columns(store, "t") == [expected]
    table = store.read("t").to_table()
    assert table.column("partition_").to_pylist() == [0, 1, 2, 0, 1, 2]
    assert table.column("Timestamp_").to_pylist() == [0, 10, 20, 30, 40, 50]
    assert table.column("KEY_").to_pylist() == [f"K{o}" for o in range(6)]
    # plateau's own columns keep their meaning: the record's time and key.
    assert table.column("key").to_pylist() == [f"k{o % 7}".encode() for o in range(6)]
    assert table.column("timestamp").type == pa.timestamp("ms", tz="UTC")
    # Settings name the stored column: the segment has its bloom filter.
    [sealed] = store.manifest.segments("t")
    assert set(store.manifest.blooms("t", ["partition_"])) == {sealed.id}


@pytest.mark.parametrize("journal", [False, True], ids=["writer", "journaled"])
def test_a_batch_holding_a_clashing_column_and_its_suffixed_twin_is_refused(
    store: Store, journal: bool
) -> None:
    writer = store.writer(WriterPolicy(fsync=False), journal=journal)
    try:
        writer.acquire("t", 0, roll=HOUR)
        writer.acquire("t", 1, roll=HOUR)
        writer.append("t", 0, batch(range(3)))
        writer.flush()
        twins = batch(
            range(3, 6),
            extra={
                "partition": pa.array([9, 9, 9], pa.int64()),
                "partition_": pa.array([1, 2, 3], pa.int64()),
            },
        )
        seq_before = writer.journal.next_seq if writer.journal is not None else None
        with pytest.raises(InvalidInputError) as refused:
            # With a good append to another partition: the group is refused whole.
            writer.append_group([Append("t", 1, (batch(range(2)),)), Append("t", 0, (twins,))])
        assert isinstance(refused.value, TwinFieldsError)
        message = str(refused.value)
        assert "topic 't' partition 0" in message
        assert "'partition' and 'partition_'" in message
        # Nothing of it was buffered or journaled: the offsets are still free.
        assert writer.next_offset("t", 0) == 3
        assert writer.next_offset("t", 1) == 0
        if writer.journal is not None:
            assert writer.journal.next_seq == seq_before
        writer.append("t", 0, batch(range(3, 6), extra={"partition_": pa.array([1, 2, 3])}))
        writer.flush()
    finally:
        writer.close()

    table = store.read("t").to_table()
    assert table.column("offset").to_pylist() == list(range(6))
    assert table.column("partition_").to_pylist() == [None, None, None, 1, 2, 3]
    assert all("partition" not in names for names in stored_columns(store, "t"))


def test_a_journal_written_before_the_rule_replays_suffixed(tmp_path: Path) -> None:
    """A journal group written by a writer that stored names as they came: the replay
    appends it again, so its rows land under the suffixed names too."""
    data = tmp_path / "data"
    Store.open(data).close()
    old = clashing(range(4))
    journal = Journal(data / JOURNAL_DIR, fsync=False)
    journal.append([Append("t", 0, (old,))], [[Prepared(old, fingerprint(old.schema), old.nbytes)]])
    journal.close(everything_sealed=False)

    store = Store.open(data)
    writer = store.writer(WriterPolicy(fsync=False), journal=True)
    try:
        writer.acquire("t", 0, roll=HOUR)
        assert replay(writer, writer.acquire) == 4
    finally:
        writer.close()
    try:
        [names] = stored_columns(store, "t")
        assert names[-3:] == ["partition_", "Timestamp_", "KEY_"]
        assert store.read("t").to_table().column("Timestamp_").to_pylist() == [0, 10, 20, 30]
    finally:
        store.close()
