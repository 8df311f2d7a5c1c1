"""Distinct-count sketches of roll-ups: k-minimum-values, the K smallest xxHash64 values of
a column's canonical bytes, as K little-endian uint64s. Below K distinct values the sketch
holds them all and the count is exact; above, the estimate is (K - 1) * 2^64 / (the K-th
smallest hash), within about 1/sqrt(K - 2) (9% at K = 128). Sketches of one column merge by
union, whatever type each segment holds it in: a value hashes as the raw rows read it, so a
whole double as its integer (int64 and double columns read as doubles) and a string that is
a number's one text as that number (a column whose types clash reads as JSON text; `_text`),
so 42 and "42" count once while "42" and "42.0" stay two strings. An
integer past int64 (a uint64 from 2**63) hashes as 16 bytes, since the 8 of int64 cannot hold
it; every value int64 holds keeps its 8, so sketches sealed before still merge. A decimal
hashes as the integer or double that is the same number (`_decimal`), so a field widened
from int64 to decimal(38, 0) counts 42 once across the segments that hold it either way."""

from __future__ import annotations

import contextlib
import math
import re
import struct
from collections.abc import Iterable
from decimal import Decimal
from typing import Literal

import numpy as np
import pyarrow as pa

from plateau_core.bloom import bloom_kind, canonical, value_hash
from plateau_core.schema import INT64_MAX, INT64_MIN

SKETCH_K = 128
SketchKind = Literal["int", "bytes", "float", "decimal"]
# Set before the 8 bytes of a double that is not a whole number, so they never hash as the
# integer of the same bit pattern.
_FRACTION = b"\x01"
_NAN = b"\x02nan"
# Set before the 16 bytes (two's complement, little-endian) of an integer past int64, so they
# never hash as a 17-byte string.
_WIDE = b"\x03"
_WIDE_BYTES = 16
# Set before the plain digits of a decimal that no double reads as (more digits than a double
# holds, or a whole number past int128), so they never hash as a string of the same text.
_DIGITS = b"\x04"
# An integer's one text, and a fraction's plain digits without trailing zeros.
_WHOLE = re.compile(r"-?(0|[1-9][0-9]*)")
_FRACTION_DIGITS = re.compile(r"-?(0|[1-9][0-9]*)\.[0-9]*[1-9]")


def sketch_kind(dtype: pa.DataType) -> SketchKind | None:
    """How a sketch hashes values of `dtype`: as a bloom filter does (integers, text and
    bytes), floats (`float`) or decimals (`decimal`); None for any other type."""
    kind = bloom_kind(dtype)
    if kind is None and pa.types.is_floating(dtype):
        return "float"
    if kind is None and pa.types.is_decimal(dtype):
        return "decimal"
    return kind


def sketch(kind: SketchKind | None, values: Iterable[object]) -> bytes:
    """The KMV sketch of distinct `values` (nulls and values no hash can take are left out)."""
    if kind is None:
        return b""
    hashes = {
        value_hash(raw)
        for value in values
        if value is not None and (raw := _canonical(kind, value)) is not None
    }
    smallest = sorted(hashes)[:SKETCH_K]
    return np.array(smallest, dtype="<u8").tobytes()


def merge_sketches(sketches: Iterable[bytes | None]) -> bytes:
    """The sketch of the union of the sketches' value sets."""
    union: set[int] = set()
    for one in sketches:
        if one:
            union.update(np.frombuffer(one, dtype="<u8").tolist())
    return np.array(sorted(union)[:SKETCH_K], dtype="<u8").tobytes()


def estimate(merged: bytes) -> float:
    """The distinct count a sketch stands for: exact below K values."""
    hashes = np.frombuffer(merged, dtype="<u8")
    if len(hashes) < SKETCH_K:
        return float(len(hashes))
    return (SKETCH_K - 1) * 2.0**64 / float(hashes[SKETCH_K - 1])


def _canonical(kind: SketchKind, value: object) -> bytes | None:
    if isinstance(value, str):
        return _text(value)
    if kind == "int" and isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return _wide(value)
    if kind == "decimal":
        return _decimal(value) if isinstance(value, Decimal) else None
    if kind != "float":
        return canonical(kind, value)
    if not isinstance(value, float):
        return None
    if math.isnan(value):
        return _NAN
    # A whole double hashes as its integer: a json field that widened from int64 to double
    # counts 12 and 12.0 once, across the segments that hold it either way (and -0.0 as 0).
    if value.is_integer() and INT64_MIN <= value <= INT64_MAX:
        return canonical("int", int(value))
    return _FRACTION + struct.pack("<d", value)


def _text(value: str) -> bytes | None:
    """A string hashes as a number only when it is that number's one text: an integer's
    digits ("42", and "18446744073709551615" as that uint64), a fraction's shortest repr as
    a double ("0.5", "1e-07"), or, for a fraction no double holds, its plain digits without
    trailing zeros. A value and the text a column whose types clash reads it as
    (plateau_core.json_text) so count once, and distinct strings stay distinct: "1.1" and
    "1.10", "42" and "42.0" are two strings, so a decimal's or a whole double's own text
    ("42.00", "42.0") is text, not the number (docs/storage.md, roll-ups)."""
    unsigned = value[1:] if value[:1] == "-" else value
    if not unsigned[:1].isdigit():
        return canonical("bytes", value)  # most text, told apart without parsing
    if _WHOLE.fullmatch(value) and value != "-0":
        # As a decimal of those digits hashes, past int128 included.
        return _decimal(Decimal(value)) or canonical("bytes", value)
    with contextlib.suppress(ValueError):
        double = float(value)
        if math.isfinite(double) and not double.is_integer():
            if repr(double) == value:
                return _FRACTION + struct.pack("<d", double)
            if _FRACTION_DIGITS.fullmatch(value) and Decimal(repr(double)) != Decimal(value):
                return _decimal(Decimal(value))  # its own digits: no double is this number
    return canonical("bytes", value)


def _wide(value: int) -> bytes | None:
    """An integer int64 cannot hold (a uint64 from 2**63), as bytes of its own: the bloom
    filter's canonical bytes end at int64, and a value no hash takes is not counted."""
    try:
        return _WIDE + value.to_bytes(_WIDE_BYTES, "little", signed=True)
    except OverflowError:  # past int128: no integer column holds one
        return None


def _decimal(value: Decimal) -> bytes | None:
    """A decimal hashes as the number it is, whatever its scale (42, 42.00): a whole one as
    that integer, as an int64 or uint64 column's value hashes, so a field widened from int64
    to decimal(38, 0) counts 42 once. One with a fraction hashes as the double that reads as
    it (0.10 as 0.1: the double whose shortest text is the same number), as a column merged
    of decimals and doubles reads it; one no double reads as (more digits than a double
    holds) hashes as its own digits, so decimals a double cannot tell apart stay apart."""
    if not value.is_finite():  # no Arrow decimal holds one; a Python caller may pass it
        return None
    if value == value.to_integral_value():
        whole = int(value)
        return _canonical("int", whole) or _DIGITS + str(whole).encode()
    number = float(value)
    if Decimal(repr(number)) == value:
        return _FRACTION + struct.pack("<d", number)
    # Trailing zeros cut by hand: normalize() rounds to the context's 28 digits.
    return _DIGITS + format(value, "f").rstrip("0").encode()
