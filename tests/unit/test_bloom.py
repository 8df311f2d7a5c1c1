"""The bloom filter layout (plateau_core.bloom): no false negatives, the false positive rate
it is sized for, canonical bytes, and pinned vectors the Spark connector is checked against."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plateau_core.bloom import (
    BLOOM_KEY,
    Bloom,
    build,
    canonical,
    footer_value,
    from_footer,
    sizing,
)

# xxHash64 of b"abc" with seed 0 (the reference implementation's value).
ABC_XXH64 = 0x44BC2CF5AD770999


@given(
    values=st.lists(st.one_of(st.text(max_size=12), st.binary(max_size=12)), max_size=200),
    fpp=st.sampled_from([0.5, 0.1, 0.01, 0.0001]),
)
@settings(max_examples=60, deadline=None)
def test_every_added_value_is_found(values: list[str | bytes], fpp: float) -> None:
    as_bytes = [v.encode() if isinstance(v, str) else v for v in values]
    bloom = build("c", pa.array(as_bytes, pa.binary()), fpp)
    assert bloom is not None
    assert all(bloom.may_contain(v) for v in values)  # a str is found as its UTF-8 bytes


@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=200))
@settings(max_examples=60, deadline=None)
def test_every_added_integer_is_found(values: list[int]) -> None:
    bloom = build("n", pa.array(values, pa.int64()), 0.01)
    assert bloom is not None
    assert all(bloom.may_contain(v) for v in values)


def test_false_positive_rate_is_near_the_target() -> None:
    members = [f"req-{i:08d}" for i in range(20_000)]
    others = [f"other-{i:08d}" for i in range(20_000)]
    for fpp in (0.1, 0.01):
        bloom = build("rid", pa.array(members), fpp)
        assert bloom is not None
        rate = sum(bloom.may_contain(v) for v in others) / len(others)
        assert rate < fpp * 1.5, (fpp, rate)
        assert rate > fpp / 4, (fpp, rate)  # not a filter sized far above its target


def test_narrower_integer_columns_hash_as_int64() -> None:
    narrow = build("n", pa.array([1, -2, 300], pa.int16()), 0.01)
    wide = build("n", pa.array([1, -2, 300], pa.int64()), 0.01)
    assert narrow == wide


@given(values=st.lists(st.integers(0, 2**64 - 1), max_size=100))
@settings(max_examples=60, deadline=None)
def test_a_uint64_column_beyond_int64_gets_a_filter_that_finds_every_value(
    values: list[int],
) -> None:
    """A uint64 above 2**63 - 1 has no int64 bytes: building the filter must not fail the
    seal (which retried it forever), and no value of the column may be ruled out."""
    bloom = build("u", pa.array([*values, 2**63, 2**64 - 1], pa.uint64()), 0.01)
    assert bloom is not None
    assert all(bloom.may_contain(v) for v in [*values, 2**63, 2**64 - 1])


def test_nulls_are_not_added_and_an_all_null_column_holds_nothing() -> None:
    bloom = build("k", pa.array([None, None], pa.binary()), 0.01)
    assert bloom is not None
    assert bloom.bits == bytes(8)
    assert not bloom.may_contain(b"")


def test_canonical_bytes() -> None:
    assert canonical("bytes", "é") == "é".encode()
    assert canonical("bytes", b"\x00\xff") == b"\x00\xff"
    assert canonical("int", 1) == b"\x01" + bytes(7)
    assert canonical("int", -1) == b"\xff" * 8
    assert canonical("int", True) is None  # a bool is not the integer 1 here
    assert canonical("int", 2**63) is None
    assert canonical("bytes", 5) is None


def test_a_value_of_another_kind_is_never_ruled_out() -> None:
    bloom = build("n", pa.array([1, 2, 3], pa.int64()), 0.01)
    assert bloom is not None
    assert bloom.may_contain("x")
    assert bloom.may_contain(1.5)


def test_sizing() -> None:
    assert sizing(0, 0.01) == (64, 7)
    bits, hashes = sizing(1000, 0.01)
    assert bits % 64 == 0
    assert 9585 <= bits < 9585 + 64
    assert hashes == 7
    assert sizing(10**6, 1e-9)[1] == 16  # capped
    assert sizing(5, 0.5) == (64, 1)


def test_footer_round_trip_and_unreadable_footers() -> None:
    blooms = (
        build("key", pa.array([b"a", b"b"]), 0.01),
        build("n", pa.array([7], pa.int32()), 0.1),
    )
    assert None not in blooms
    raw = footer_value([b for b in blooms if b is not None])
    assert from_footer({BLOOM_KEY: raw}) == blooms
    assert from_footer(None) == ()
    assert from_footer({BLOOM_KEY: b"{not json"}) == ()
    assert from_footer({BLOOM_KEY: b'{"v": 99, "columns": {}}'}) == ()


# Vectors shared with the connector's check (tests/spark/test_bloom_pruning.py): a filter
# built here, probed in the JVM.
VECTOR_VALUES: list[str | bytes | int] = ["abc", b"\x00\x01", "", "é-ü", 0, -1, 2**62, 123456789]


def vector_bloom(kind: str) -> Bloom:
    if kind == "int":
        values = [v for v in VECTOR_VALUES if isinstance(v, int)]
        found = build("n", pa.array(values, pa.int64()), 0.01)
    else:
        raw = [
            v.encode() if isinstance(v, str) else v for v in VECTOR_VALUES if not isinstance(v, int)
        ]
        found = build("k", pa.array(raw, pa.binary()), 0.01)
    assert found is not None
    return found


@pytest.mark.parametrize("kind", ["int", "bytes"])
def test_vectors_are_found(kind: str) -> None:
    bloom = vector_bloom(kind)
    for value in VECTOR_VALUES:
        if (kind == "int") == isinstance(value, int):
            assert bloom.may_contain(value)


def test_xxh64_reference_value() -> None:
    import xxhash  # noqa: PLC0415

    assert xxhash.xxh64_intdigest(b"abc", seed=0) == ABC_XXH64
