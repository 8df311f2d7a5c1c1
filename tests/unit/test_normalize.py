"""normalize_batch remembers how it checked a schema; these make sure what it remembers never
lets a batch through that a fresh check would refuse, nor mixes up two schemas."""

from __future__ import annotations

import pyarrow as pa
import pytest

from plateau_core import InvalidInputError
from plateau_core.schema import fingerprint, normalize_batch, normalized
from tests.support import batch


def _with_offsets(offsets: pa.Array) -> pa.RecordBatch:
    good = batch(list(range(len(offsets))))
    return good.set_column(0, "offset", offsets)


def test_offsets_out_of_order_are_found_in_a_long_batch() -> None:
    values = list(range(100_000))
    values[-2], values[-1] = values[-1], values[-2]
    normalize_batch(batch(list(range(100_000))))  # the same schema, planned and accepted
    with pytest.raises(InvalidInputError, match="goes backwards"):
        normalize_batch(_with_offsets(pa.array(values, pa.int64())))


def test_offsets_are_checked_within_a_slice_only() -> None:
    # [5, 6, 7, 1, 2]: the slice [5, 6, 7] is in order, the slice [7, 1] is not.
    offsets = pa.array([5, 6, 7, 1, 2], pa.int64())
    whole = _with_offsets(offsets)
    assert normalize_batch(whole.slice(0, 3)).column("offset").to_pylist() == [5, 6, 7]
    with pytest.raises(InvalidInputError, match="goes backwards"):
        normalize_batch(whole.slice(2, 2))
    assert normalize_batch(whole.slice(3, 2)).column("offset").to_pylist() == [1, 2]


def test_narrow_offsets_are_widened_after_a_batch_of_int64() -> None:
    normalize_batch(batch([0, 1]))
    narrow = _with_offsets(pa.array([3, 4], pa.int32()))
    out = normalize_batch(narrow)
    assert out.schema.field("offset").type == pa.int64()
    assert out.column("offset").to_pylist() == [3, 4]


def test_a_schema_differing_only_in_field_metadata_keeps_its_own() -> None:
    plain = batch([0, 1])
    tagged_field = plain.schema.field("value").with_metadata({"unit": "bytes"})
    tagged = pa.RecordBatch.from_arrays(
        plain.columns, schema=plain.schema.set(plain.schema.get_field_index("value"), tagged_field)
    )
    first, first_print = normalized(plain)
    second, second_print = normalized(tagged)
    assert first.schema.field("value").metadata is None
    assert second.schema.field("value").metadata == {b"unit": b"bytes"}
    assert first_print == fingerprint(first.schema)
    assert second_print == fingerprint(second.schema)
    assert first_print != second_print


def test_a_refused_schema_stays_refused() -> None:
    bad = batch([0, 1]).append_column("span", pa.array([1, 2], pa.duration("s")))
    for _ in range(2):
        with pytest.raises(InvalidInputError, match="unsupported Arrow type duration"):
            normalize_batch(bad)


def test_columns_follow_the_fixed_ones_in_input_order_for_every_batch() -> None:
    data = batch([0, 1])
    shuffled = pa.RecordBatch.from_arrays(
        [data.column("value"), data.column("timestamp"), data.column("key"), data.column("offset")],
        names=["value", "timestamp", "key", "offset"],
    )
    for offsets in ([0, 1], [7, 9]):
        again = shuffled.set_column(3, "offset", pa.array(offsets, pa.int64()))
        out = normalize_batch(again)
        assert out.schema.names == ["offset", "timestamp", "value", "key"]
        assert out.column("offset").to_pylist() == offsets
        assert out.column("value").equals(data.column("value"))
