"""Bloom filters of a segment's column values: one layout, built here and probed here and by
the Spark connector (org.plateau.spark.Bloom), which must agree bit for bit.

The layout (version 1):

- A value's canonical bytes: a string's UTF-8 bytes, a byte string as it is, an integer as
  8 bytes of two's complement int64, little-endian. Strings and byte strings share their
  bytes on purpose: `key = 'abc'` finds the key b"abc".
- h = xxHash64(canonical bytes, seed 0), as an unsigned 64-bit number; h1 = its low 32 bits,
  h2 = its high 32 bits. The filter's k bit positions are (h1 + i * h2) mod m for
  i = 0 .. k-1 (Kirsch-Mitzenmacher double hashing; no term overflows 64 bits).
- m bits, a multiple of 64, as m / 8 bytes: bit b is bit (b mod 8) of byte b div 8.
- For n distinct values and a false positive rate p: m = ceil(-n ln p / (ln 2)^2) rounded up
  to 64 (at least 64), k = round(-log2 p), between 1 and 16 (the optimum for the unrounded
  m; rounding m up only lowers the rate).

Nulls are not added (a null equals nothing). A filter answers "absent" only when a value was
never added: a false positive costs a file opened, never a row.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from plateau_core.schema import INT64_MAX, INT64_MIN

BloomKind = Literal["int", "bytes"]
LAYOUT = 1
MAX_HASHES = 16


@dataclass(frozen=True)
class Bloom:
    """A column's filter in one segment: `kind` says how values become canonical bytes."""

    column: str
    kind: BloomKind
    hashes: int  # k
    bits: bytes  # m / 8 bytes

    def may_contain(self, value: object) -> bool:
        """False only when `value` was certainly never added; True for a value this filter
        cannot judge (of another kind)."""
        raw = canonical(self.kind, value)
        return raw is None or self.may_contain_hash(value_hash(raw))

    def may_contain_hash(self, hashed: int) -> bool:
        """`may_contain` for a value already hashed (`value_hash`): a query probes one value
        against many segments' filters, so it hashes once. Plain integers: for one value,
        faster than building arrays."""
        bits = self.bits
        size = len(bits) * 8
        low, high = hashed & 0xFFFFFFFF, hashed >> 32
        for i in range(self.hashes):
            position = (low + i * high) % size
            if not (bits[position >> 3] >> (position & 7)) & 1:
                return False
        return True


def bloom_kind(dtype: pa.DataType) -> BloomKind | None:
    t = pa.types
    if t.is_integer(dtype):
        return "int"
    if t.is_string(dtype) or t.is_large_string(dtype) or t.is_binary(dtype):
        return "bytes"
    if t.is_large_binary(dtype):
        return "bytes"
    return None


def canonical(kind: BloomKind, value: object) -> bytes | None:
    """The bytes a value is hashed as; None when the kind cannot hold it."""
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        if not INT64_MIN <= value <= INT64_MAX:
            return None
        return value.to_bytes(8, "little", signed=True)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    return None


def sizing(distinct: int, fpp: float) -> tuple[int, int]:
    """(m bits, k hashes) for `distinct` values at false positive rate `fpp`."""
    n = max(1, distinct)
    bits = math.ceil(-n * math.log(fpp) / (math.log(2) ** 2))
    bits = max(64, -(-bits // 64) * 64)
    hashes = min(MAX_HASHES, max(1, round(-math.log2(fpp))))
    return bits, hashes


def build(column: str, values: pa.ChunkedArray | pa.Array, fpp: float) -> Bloom | None:
    """The filter of a column's values; None for a type without filters."""
    kind = bloom_kind(values.type)
    if kind is None:
        return None
    distinct = pc.unique(values.drop_null() if isinstance(values, pa.Array) else values)
    distinct = distinct.drop_null()
    bits, hashes = sizing(len(distinct), fpp)
    table = np.zeros(bits // 8, np.uint8)
    if len(distinct):
        found = [value_hash(raw) for raw in _canonical_all(kind, distinct)]
        positions = _positions(np.array(found, np.uint64), hashes, bits)
        np.bitwise_or.at(table, positions >> 3, (1 << (positions & 7)).astype(np.uint8))
    return Bloom(column, kind, hashes, table.tobytes())


def _canonical_all(kind: BloomKind, distinct: pa.Array) -> Iterable[bytes]:
    if kind == "int":
        # A uint64 above 2**63 - 1 wraps to a negative int64: a bit no probe of a value in
        # range would miss is never dropped (canonical() judges no value above int64), it
        # only adds a false positive for that negative number.
        wrapped = distinct.cast(pa.int64(), safe=False)
        packed = wrapped.to_numpy(zero_copy_only=False).astype("<i8").tobytes()
        return (packed[i : i + 8] for i in range(0, len(packed), 8))
    if pa.types.is_string(distinct.type) or pa.types.is_large_string(distinct.type):
        distinct = distinct.cast(pa.large_binary())
    return (v for v in distinct.to_pylist() if isinstance(v, bytes))


def value_hash(raw: bytes) -> int:
    """xxHash64 (seed 0) of a value's canonical bytes."""
    return xxhash.xxh64_intdigest(raw, seed=0)


def _positions(hashes: np.ndarray, k: int, bits: int) -> np.ndarray:
    """The bit positions of each hash, flattened: (h1 + i * h2) mod m, i < k."""
    low = hashes & np.uint64(0xFFFFFFFF)
    high = hashes >> np.uint64(32)
    steps = np.arange(k, dtype=np.uint64)
    combined = low[:, None] + steps[None, :] * high[:, None]
    result: np.ndarray = (combined % np.uint64(bits)).ravel()
    return result


# --- in the segment footer -----------------------------------------------------------------

BLOOM_KEY = b"plateau.blooms"


def footer_value(blooms: Iterable[Bloom]) -> bytes:
    body = {
        "v": LAYOUT,
        "columns": {
            b.column: {"kind": b.kind, "k": b.hashes, "bits": base64.b64encode(b.bits).decode()}
            for b in blooms
        },
    }
    return json.dumps(body, separators=(",", ":")).encode()


def from_footer(metadata: Mapping[bytes, bytes] | None) -> tuple[Bloom, ...]:
    """The filters a segment file was written with: none for files without, of a layout
    this version does not know, or unreadable. A segment without a filter is never ruled out
    by one, so leaving a filter unused is always safe."""
    raw = (metadata or {}).get(BLOOM_KEY)
    if raw is None:
        return ()
    try:
        body = json.loads(raw)
        if body.get("v") != LAYOUT:
            return ()
        return tuple(
            Bloom(column, entry["kind"], int(entry["k"]), base64.b64decode(entry["bits"]))
            for column, entry in sorted(body["columns"].items())
            if entry["kind"] in ("int", "bytes")
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return ()
