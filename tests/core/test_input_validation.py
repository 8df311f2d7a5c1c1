"""Bad input is refused with a message naming what is wrong; nothing stored is touched."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from plateau_core import InvalidInputError, RollPolicy, Store, WriterPolicy
from plateau_core.names import validate_topic
from tests.support import batch


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "non-empty"),
        ("a" * 250, "at most 249"),
        (".", "reserved"),
        ("..", "reserved"),
        ("a/b", r"\[A-Za-z0-9._-\]"),
        ("../escape", r"\[A-Za-z0-9._-\]"),
        ("spa ce", r"\[A-Za-z0-9._-\]"),
        ("naïve", r"\[A-Za-z0-9._-\]"),
        (None, "non-empty string"),
    ],
)
def test_bad_topic_names_are_refused(name: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        validate_topic(name)


def test_good_topic_names_pass() -> None:
    for name in ("events", "a.b-c_d", "x" * 249, "..."):
        assert validate_topic(name) == name


def test_writer_refuses_bad_topic_before_creating_anything(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        with pytest.raises(InvalidInputError, match="topic name"):
            writer.acquire("../../etc", 0)
        assert not (store.data_dir / "topics").exists() or not any(
            (store.data_dir / "topics").iterdir()
        )
    finally:
        writer.close()


def _bad_batches() -> list[tuple[pa.RecordBatch, str]]:
    good = batch([0, 1, 2])
    ts = good.column("timestamp")
    return [
        (good.drop_columns(["offset"]), "no 'offset' column"),
        (good.drop_columns(["timestamp"]), "no 'timestamp' column"),
        (good.set_column(0, "offset", pa.array(["a", "b", "c"])), "'offset' must be int64"),
        (good.set_column(0, "offset", pa.array([0, None, 2], pa.int64())), "'offset' has nulls"),
        (good.set_column(0, "offset", pa.array([2, 1, 3], pa.int64())), "goes backwards"),
        # Named -000…1.arrow, such a segment was no segment to recovery (an orphan of it was
        # never removed), and its watermark, -1, is Kafka's "latest" to a consumer.
        (good.set_column(0, "offset", pa.array([-2, -1, 0], pa.int64())), "offset' is negative"),
        (batch([0]).set_column(0, "offset", pa.array([-1], pa.int64())), "offset' is negative"),
        (
            good.set_column(0, "offset", pa.array([0, 1, 2**63], pa.uint64())),
            "offset' has values past the largest int64",
        ),
        (good.set_column(1, "timestamp", pa.array([1, 2, 3])), "'timestamp' must be a timestamp"),
        (
            good.set_column(1, "timestamp", pa.array([None, 1, 2], ts.type)),
            "'timestamp' has nulls",
        ),
        (good.set_column(2, "key", pa.array(["a", "b", "c"])), "column 'key' must be binary"),
        (
            good.append_column("headers", pa.array([1, 2, 3])),
            "column 'headers' must be",
        ),
        (
            good.append_column("span", pa.array([1, 2, 3], pa.duration("s"))),
            "column 'span' has unsupported Arrow type duration",
        ),
        (
            good.append_column("half", pa.array([1, 2, 3], pa.float16())),
            "column 'half' has unsupported Arrow type halffloat",
        ),
        (
            good.append_column("tags", pa.array(["a", "b", "a"]).dictionary_encode()),
            "column 'tags' has unsupported Arrow type dictionary",
        ),
    ]


@pytest.mark.parametrize(("bad", "message"), _bad_batches())
def test_bad_batches_are_refused_and_nothing_changes(
    store: Store, bad: pa.RecordBatch, message: str
) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_rows=5))
        writer.append("t", 0, batch([0, 1, 2, 3]))
        before = writer.stats()
        with pytest.raises(InvalidInputError, match=message):
            writer.append("t", 0, bad)
        assert writer.stats() == before
        writer.append("t", 0, batch([10, 11]))
        writer.flush()
    finally:
        writer.close()
    assert store.read("t").to_table().column("offset").to_pylist() == [0, 1, 2, 3, 10, 11]


def test_offsets_going_backwards_across_appends_are_refused(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0)
        writer.append("t", 0, batch([5, 6]))
        with pytest.raises(InvalidInputError, match="starts at 6, not after the last accepted"):
            writer.append("t", 0, batch([6, 7]))
        writer.flush()
        # After a seal the watermark still guards the partition.
        with pytest.raises(InvalidInputError, match="starts at 3"):
            writer.append("t", 0, batch([3]))
    finally:
        writer.close()


def test_offsets_below_the_watermark_are_refused_after_reopen(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        writer.acquire("t", 0)
        writer.append("t", 0, batch([0, 1, 2]))
        writer.close()
    with Store.open(tmp_path) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            assert writer.acquire("t", 0) == 3
            with pytest.raises(InvalidInputError, match="not after the last accepted offset 2"):
                writer.append("t", 0, batch([2, 3]))
        finally:
            writer.close()


def test_timestamps_of_other_units_are_converted(store: Store) -> None:
    data = batch([0, 1]).set_column(
        1, "timestamp", pa.array([1_700_000_000_123_456, 1_700_000_000_999_999], pa.timestamp("us"))
    )
    writer = store.writer(WriterPolicy(fsync=False))
    writer.acquire("t", 0)
    writer.append("t", 0, data)
    writer.close()
    table = store.read("t").to_table()
    assert table.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [
        1_700_000_000_123,
        1_700_000_000_999,
    ]


def test_fixed_columns_lead_whatever_the_input_order(store: Store) -> None:
    data = batch([0, 1])
    shuffled = pa.RecordBatch.from_arrays(
        [data.column("value"), data.column("timestamp"), data.column("offset")],
        names=["value", "timestamp", "offset"],
    )
    writer = store.writer(WriterPolicy(fsync=False))
    writer.acquire("t", 0)
    writer.append("t", 0, shuffled)
    writer.close()
    assert store.read("t").to_table().schema.names == ["offset", "timestamp", "value"]


@pytest.mark.parametrize("next_offset", [-1, 2**63])
def test_a_skip_to_an_offset_that_is_none_is_refused(store: Store, next_offset: int) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0)
        with pytest.raises(InvalidInputError, match=f"advance_to {next_offset} is not an offset"):
            writer.skip("t", 0, next_offset)
        writer.skip("t", 0, 5)
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    assert store.manifest.watermark("t", 0) == 5


def test_a_table_instead_of_a_record_batch_is_refused_naming_both(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0)
        table = pa.Table.from_batches([batch([0, 1])])
        with pytest.raises(InvalidInputError, match=r"pyarrow\.RecordBatch, not a pyarrow\.Table"):
            writer.append("t", 0, table)  # type: ignore[arg-type]
        for part in table.to_batches():
            writer.append("t", 0, part)
        writer.flush()
    finally:
        writer.close()
    assert store.read("t").to_table().column("offset").to_pylist() == [0, 1]
