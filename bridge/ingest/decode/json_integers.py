"""Integers beyond int64 in inferred json fields, kept exact as decimal(38, 0).

Arrow's JSON reader infers a double for an integer beyond int64 (a uint64 id such as
18446744073709551615), rounded: an id 2**63 + 1 landed as 9223372036854775808.0. Spark's
own JSON schema inference reads such an integer as decimal(38, 0) when it has at most 38
digits, and as a double only beyond, or beside a number written with a fraction or an
exponent. The same holds here: a place (a column, or one inside structs and lists) that
Arrow read as doubles is looked at again only when it holds a value of int64's magnitude or
more, so a block of ordinary doubles costs nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

WHOLE = pa.decimal128(38, 0)
_INT64_MAGNITUDE = 2**63
_DECIMAL_MAGNITUDE = 10**38

# A place in a json record: a top-level field's name, then struct children by name and list
# items as None.
Place = tuple[str | None, ...]


def place_name(place: Place) -> str:
    """`o.ids[]` for the items of the list `ids` in the object `o`."""
    name = ""
    for step in place:
        name += "[]" if step is None else (f".{step}" if name else step)
    return name


def float_places(schema: pa.Schema, pinned: pa.Schema | None) -> list[Place]:
    """The places where `schema` (a block as Arrow read it) has doubles that `pinned` (the
    types the block was read with) does not hold as doubles already."""
    known = {} if pinned is None else {f.name: f.type for f in pinned}
    return [(f.name, *p) for f in schema for p in _floats_in(f.type, known.get(f.name))]


def _floats_in(dtype: pa.DataType, pinned: pa.DataType | None) -> list[Place]:
    t = pa.types
    if t.is_float64(dtype):
        return [] if pinned is not None and t.is_float64(pinned) else [()]
    if t.is_list(dtype):
        inner = pinned.value_type if pinned is not None and t.is_list(pinned) else None
        return [(None, *p) for p in _floats_in(dtype.value_type, inner)]
    if t.is_struct(dtype):
        kids = (
            {c.name: c.type for c in pinned} if pinned is not None and t.is_struct(pinned) else {}
        )
        return [(c.name, *p) for c in dtype for p in _floats_in(c.type, kids.get(c.name))]
    return []


def holds_large(table: pa.Table, place: Place) -> bool:
    """Whether the doubles at `place` of `table` hold one of int64's magnitude or more: only
    an integer beyond int64 (or a number written so large) reads as one."""
    name = place[0]
    assert name is not None
    for chunk in table.column(name).chunks:
        values: pa.Array = chunk
        for step in place[1:]:
            values = values.flatten() if step is None else values.field(step)
        if len(values) and (pc.max(pc.abs(values)).as_py() or 0) >= _INT64_MAGNITUDE:
            return True
    return False


@dataclass
class Integers:
    """What the text of a block holds at the places looked at."""

    # Only integers, some beyond int64, none beyond 38 digits: decimal(38, 0).
    exact: list[Place] = field(default_factory=list)
    # Only integers, some beyond 38 digits: doubles, rounded; the line of the first such.
    beyond: dict[Place, int] = field(default_factory=dict)


def integers_at(lines: Sequence[bytes], places: Sequence[Place]) -> Integers:
    """The places of `places` that hold nothing but integers in `lines` (JSON objects, which
    Arrow read), and some beyond int64. A place holding a number written with a fraction or
    an exponent (`1.0`, `1e3`) anywhere in the block stays a double, as in Spark."""
    fractions: set[Place] = set()
    large: set[Place] = set()
    beyond: dict[Place, int] = {}
    for i, line in enumerate(lines):
        try:
            record = json.loads(line, parse_float=_fraction)
        except (ValueError, RecursionError):
            return Integers()  # Arrow read what Python does not: the doubles stay
        for place in places:
            if place in fractions:
                continue
            for value in _values(record, place):
                if value is _FRACTION:
                    fractions.add(place)
                    break
                if not isinstance(value, int) or isinstance(value, bool):
                    continue
                if abs(value) >= _DECIMAL_MAGNITUDE:
                    beyond.setdefault(place, i)
                elif not -_INT64_MAGNITUDE <= value < _INT64_MAGNITUDE:
                    large.add(place)
    return Integers(
        exact=[p for p in places if p in large and p not in fractions and p not in beyond],
        beyond={p: i for p, i in beyond.items() if p not in fractions},
    )


_FRACTION = object()


def _fraction(_text: str) -> object:
    return _FRACTION


def _values(value: object, place: Place) -> Iterator[object]:
    if not place:
        yield value
        return
    step, rest = place[0], place[1:]
    if step is None:
        if isinstance(value, list):
            for item in value:
                yield from _values(item, rest)
    elif isinstance(value, dict) and step in value:
        yield from _values(value[step], rest)


def with_exact(schema: pa.Schema, places: Sequence[Place]) -> pa.Schema:
    """`schema` with decimal(38, 0) at each of `places`."""
    fields = []
    for f in schema:
        dtype = f.type
        for place in places:
            if place[0] == f.name:
                dtype = _typed_at(dtype, place[1:])
        fields.append(f.with_type(dtype))
    return pa.schema(fields, metadata=schema.metadata)


def _typed_at(dtype: pa.DataType, place: Place) -> pa.DataType:
    if not place:
        return WHOLE
    step, rest = place[0], place[1:]
    if step is None:
        return pa.list_(dtype.value_field.with_type(_typed_at(dtype.value_type, rest)))
    return pa.struct([c.with_type(_typed_at(c.type, rest)) if c.name == step else c for c in dtype])
