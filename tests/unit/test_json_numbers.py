"""An inferred json field written as an integer in some records and with a fraction in
others becomes a double wherever the fraction comes (the same block, a later block or poll,
after a restart; in a column, a struct or a list); every other change of type stays poison,
and declared types stay as declared."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from bridge.config import TopicMapping
from bridge.consume.messages import records_of
from bridge.ingest.decode import Decoded, decoder_for
from bridge.ingest.decode.common import Decoder
from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.schema_merge import merged_schema

# How the records that met a fraction reach the decoder: polls (decode calls) of values.
WHERE: dict[str, list[list[int | float | str]]] = {
    "one block": [[12, 12.5, 3]],
    "later poll": [[12], [12.5, 3]],
    # The poll's block fails on the text and is split: the fraction is in a later piece.
    "later block": [[12, "x", 12.5, 3]],
}
# Where a value of WHERE is placed in a record, and the type it then has.
PLACES: dict[str, tuple[Callable[[object], dict[str, object]], pa.DataType]] = {
    "column": (lambda v: {"x": v}, pa.float64()),
    "struct": (
        lambda v: {"o": {"x": v, "n": 1}},
        pa.struct([("x", pa.float64()), ("n", pa.int64())]),
    ),
    "list": (lambda v: {"l": [v, 1]}, pa.list_(pa.float64())),
    "list of structs": (lambda v: {"s": [{"x": v}]}, pa.list_(pa.struct([("x", pa.float64())]))),
}


def _decoder(**mapping: Any) -> Decoder:
    return decoder_for(TopicMapping.model_validate({"source": "t", "format": "json", **mapping}))


def _decode_polls(decoder: Decoder, polls: Sequence[Sequence[object]]) -> list[Decoded]:
    results, offset = [], 0
    for poll in polls:
        messages = [_message(offset + i, json.dumps(v).encode()) for i, v in enumerate(poll)]
        results.append(decoder.decode(records_of(messages)))
        offset += len(poll)
    return results


def _message(offset: int, value: bytes) -> Message:
    return Message(
        topic="t",
        partition=0,
        offset=offset,
        value=value,
        timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000),
    )


def _rows(results: Sequence[Decoded]) -> dict[int, dict[str, Any]]:
    return {r["offset"]: r for d in results for b in d.batches for r in b.to_pylist()}


def _poison(results: Sequence[Decoded]) -> dict[int, str]:
    return {p.offset: p.error for d in results for p in d.poison}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("where", WHERE)
def test_an_integer_field_that_meets_a_fraction_becomes_a_double(where: str, place: str) -> None:
    shape, widened = PLACES[place]
    polls = [[shape(v) for v in poll] for poll in WHERE[where]]
    results = _decode_polls(_decoder(), polls)
    poison = _poison(results)
    assert set(poison) == ({1} if where == "later block" else set()), poison
    (name,) = shape(0)
    assert results[-1].batches[-1].schema.field(name).type == widened
    numbers = [v for poll in WHERE[where] for v in poll if not isinstance(v, str)]
    assert [r[name] for r in _rows(results).values()] == [shape(float(v))[name] for v in numbers]


@pytest.mark.parametrize("place", PLACES)
def test_a_seeded_integer_field_that_meets_a_fraction_becomes_a_double(place: str) -> None:
    """After a restart the decoder starts from the stored columns: an int64 there widens as
    it would have without the restart."""
    shape, widened = PLACES[place]
    first = _decoder()
    (stored,) = _decode_polls(first, [[shape(12)]])
    again = _decoder()
    again.seed(stored.batches[0].schema)
    results = _decode_polls(again, [[shape(12.5), shape(4)]])
    assert _poison(results) == {}
    (name,) = shape(0)
    assert results[0].batches[0].schema.field(name).type == widened
    assert [r[name] for r in _rows(results).values()] == [shape(12.5)[name], shape(4.0)[name]]


def test_a_seed_of_segments_holding_an_int_and_a_double_reads_integers_as_doubles() -> None:
    decoder = _decoder()
    fixed = [("offset", pa.int64()), ("timestamp", pa.timestamp("ms", tz="UTC"))]
    older = pa.schema([*fixed, ("x", pa.int64())])
    newer = pa.schema([*fixed, ("x", pa.float64())])
    decoder.seed(merged_schema([older, newer]).settled())
    results = _decode_polls(decoder, [[{"x": 1}, {"x": 2}]])
    assert results[0].batches[0].schema.field("x").type == pa.float64()
    assert [r["x"] for r in _rows(results).values()] == [1.0, 2.0]


def test_only_the_fields_holding_fractions_widen() -> None:
    decoder = _decoder()
    first = {"a": 1, "b": 2, "o": {"x": 1, "y": 2}, "l": [1]}
    later = {"a": 1.5, "b": 3, "o": {"x": 4, "y": 0.5}, "l": [2]}
    results = _decode_polls(decoder, [[first], [later]])
    schema = results[1].batches[0].schema
    assert schema.field("a").type == pa.float64()
    assert schema.field("b").type == pa.int64()
    assert schema.field("o").type == pa.struct([("x", pa.int64()), ("y", pa.float64())])
    assert schema.field("l").type == pa.list_(pa.int64())


@pytest.mark.parametrize("together", [False, True], ids=["polls", "one poll"])
def test_other_changes_of_type_stay_poison_beside_a_widening(together: bool) -> None:
    """Text, an object or an array where a number was, and a fraction next to them: only the
    fraction lands (its field widened), before and after the widening."""
    changes: list[object] = [{"x": "one"}, {"x": 1.5, "y": 1}, {"x": {"a": 1}}, {"x": [1]}]
    changes += [{"x": 2, "y": "y"}, {"x": "two"}, {"x": 3}]
    first: object = {"x": 1, "y": 1}
    polls = [[first, *changes]] if together else [[first], changes]
    results = _decode_polls(_decoder(), polls)
    poison = _poison(results)
    assert set(poison) == {1, 3, 4, 5, 6}
    assert "Column(/y) changed from number to string" in poison[5]  # `y` did not widen
    rows = _rows(results)
    assert {o: (r["x"], r["y"]) for o, r in rows.items()} == {
        0: (1, 1),
        2: (1.5, 1),
        7: (3.0, None),
    }
    assert results[-1].batches[-1].schema.field("y").type == pa.int64()


@pytest.mark.parametrize("schema", [{"x": "int"}, {"x": "int", "at": "timestamp"}])
@pytest.mark.parametrize("where", ["one block", "later poll"])
def test_a_declared_int_meeting_a_fraction_stays_poison(schema: dict[str, str], where: str) -> None:
    polls = [[{"x": v} for v in poll] for poll in WHERE[where]]
    results = _decode_polls(_decoder(schema=schema), polls)
    assert set(_poison(results)) == {1}
    assert "couldn't parse:12.5" in _poison(results)[1]
    assert {r["x"] for r in _rows(results).values()} == {12, 3}
    assert all(b.schema.field("x").type == pa.int64() for d in results for b in d.batches)


def test_segments_sealed_before_and_after_the_widening_read_as_one_table(tmp_path: Path) -> None:
    """The decoder's batches, int64 then double, land in segments of each type; the topic
    reads as doubles, with `where` on either side of the change."""
    results = _decode_polls(_decoder(), [[{"x": 12}, {"x": 7}], [{"x": 12.5}, {"x": 12}]])
    with Store.open(tmp_path / "data") as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
            for decoded in results:
                for batch in decoded.batches:
                    writer.append("t", 0, batch)
            writer.flush()
        finally:
            writer.close()
        types = {str(s.field("x").type) for s in store.manifest.schemas("t").values()}
        assert types == {"int64", "double"}
        table = store.read("t", columns=["offset", "x"]).to_table()
        assert table.schema.field("x").type == pa.float64()
        assert table.to_pylist() == [
            {"offset": 0, "x": 12.0},
            {"offset": 1, "x": 7.0},
            {"offset": 2, "x": 12.5},
            {"offset": 3, "x": 12.0},
        ]
        for wanted, offsets in ((12, [0, 3]), (12.0, [0, 3]), ([12.5, 7], [1, 2])):
            found = store.read("t", columns=["offset"], where={"x": wanted}).to_table()
            assert found.column("offset").to_pylist() == offsets, wanted
