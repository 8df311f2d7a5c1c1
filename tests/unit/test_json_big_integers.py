"""An inferred json field holding integers beyond int64 (uint64 ids) is a decimal(38, 0),
exact, wherever they come (the same block, a later poll or block, after a restart; in a
column, a struct or a list); beside a number with a fraction it is a double, and beyond 38
digits a double too, logged; a declared `int` keeps its error."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from structlog.testing import capture_logs

from bridge.config import TopicMapping
from bridge.consume.messages import records_of
from bridge.ingest.decode import Decoded, decoder_for
from bridge.ingest.decode.common import Decoder
from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.schema_merge import merged_schema

WHOLE = pa.decimal128(38, 0)
BIG = 2**63 + 1  # a double rounds it to 2**63
UINT64_MAX = 2**64 - 1
# How the integer beyond int64 reaches the decoder: polls (decode calls) of values.
WHERE: dict[str, list[list[int | str]]] = {
    "one block": [[12, BIG, -UINT64_MAX]],
    "later poll": [[12], [BIG, -UINT64_MAX]],
    # The poll's block fails on the text and is split: the big integer is in a later piece.
    "later block": [[12, "x", BIG, -UINT64_MAX]],
}
PLACES: dict[str, tuple[Callable[[object], dict[str, object]], pa.DataType]] = {
    "column": (lambda v: {"id": v}, WHOLE),
    "struct": (
        lambda v: {"o": {"id": v, "n": 1}},
        pa.struct([("id", WHOLE), ("n", pa.int64())]),
    ),
    "list": (lambda v: {"l": [v, 1]}, pa.list_(WHOLE)),
    "list of structs": (lambda v: {"s": [{"id": v}]}, pa.list_(pa.struct([("id", WHOLE)]))),
}


def _decoder(**mapping: Any) -> Decoder:
    return decoder_for(TopicMapping.model_validate({"source": "t", "format": "json", **mapping}))


def _decode_polls(
    decoder: Decoder, polls: Sequence[Sequence[object]], offset: int = 0
) -> list[Decoded]:
    results = []
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


def _types(results: Sequence[Decoded], name: str) -> list[pa.DataType]:
    return [b.schema.field(name).type for d in results for b in d.batches]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("where", WHERE)
def test_integers_beyond_int64_land_exact_as_decimals(where: str, place: str) -> None:
    shape, exact = PLACES[place]
    polls = [[shape(v) for v in poll] for poll in WHERE[where]]
    results = _decode_polls(_decoder(), polls)
    assert set(_poison(results)) == ({1} if where == "later block" else set())
    (name,) = shape(0)
    assert _types(results, name)[-1] == exact
    numbers = [v for poll in WHERE[where] for v in poll if not isinstance(v, str)]
    got = [r[name] for r in _rows(results).values()]
    # The one batch before the change holds int64; the rest are decimals, every digit kept.
    wanted = [shape(Decimal(v) if v != 12 or where == "one block" else v)[name] for v in numbers]
    assert got == wanted


@pytest.mark.parametrize("place", PLACES)
def test_a_seeded_integer_field_meeting_an_integer_beyond_int64_becomes_a_decimal(
    place: str,
) -> None:
    shape, exact = PLACES[place]
    (stored,) = _decode_polls(_decoder(), [[shape(12)]])
    again = _decoder()
    again.seed(stored.batches[0].schema)
    results = _decode_polls(again, [[shape(UINT64_MAX), shape(4)]])
    assert _poison(results) == {}
    (name,) = shape(0)
    assert _types(results, name) == [exact]
    assert [r[name] for r in _rows(results).values()] == [
        shape(Decimal(UINT64_MAX))[name],
        shape(Decimal(4))[name],
    ]


def test_a_seeded_decimal_field_stays_a_decimal_and_takes_small_integers() -> None:
    decoder = _decoder()
    fixed = [("offset", pa.int64()), ("timestamp", pa.timestamp("ms", tz="UTC"))]
    older = pa.schema([*fixed, ("id", pa.int64())])
    newer = pa.schema([*fixed, ("id", WHOLE)])
    decoder.seed(merged_schema([older, newer]).settled())
    results = _decode_polls(decoder, [[{"id": 1}], [{"id": BIG}]])
    assert _types(results, "id") == [WHOLE, WHOLE]
    assert [r["id"] for r in _rows(results).values()] == [Decimal(1), Decimal(BIG)]


@pytest.mark.parametrize("where", ["one block", "later poll", "after a restart"])
def test_a_decimal_field_that_meets_a_fraction_becomes_a_double(where: str) -> None:
    first: list[object] = [{"id": BIG}, {"id": 3}]
    later: list[object] = [{"id": 12.5}]
    if where == "one block":
        results = _decode_polls(_decoder(), [first + later])
    elif where == "later poll":
        results = _decode_polls(_decoder(), [first, later])
    else:
        results = _decode_polls(_decoder(), [first])
        decoder = _decoder()
        decoder.seed(results[0].batches[0].schema)
        results += _decode_polls(decoder, [later], offset=len(first))
    assert _types(results, "id")[-1] == pa.float64()
    assert [r["id"] for r in _rows(results).values()] == (
        [float(BIG), 3.0, 12.5] if where == "one block" else [Decimal(BIG), Decimal(3), 12.5]
    )


@pytest.mark.parametrize("number", ["1.0", "1e3", "2.5"])
def test_an_integer_beyond_int64_beside_a_number_written_with_a_fraction_is_a_double(
    number: str,
) -> None:
    """As Spark infers it: a field of doubles that also holds a big integer."""
    values = [b'{"id": 9223372036854775809}', f'{{"id": {number}}}'.encode()]
    messages = [_message(i, v) for i, v in enumerate(values)]
    decoded = _decoder().decode(records_of(messages))
    assert [b.schema.field("id").type for b in decoded.batches] == [pa.float64()]


def test_numbers_of_int64_magnitude_written_as_doubles_stay_doubles() -> None:
    results = _decode_polls(_decoder(), [[{"x": 1e19}, {"x": -2e30}]])
    assert _types(results, "x") == [pa.float64()]


@pytest.mark.parametrize("where", ["new field", "int64 field", "decimal field"])
def test_an_integer_beyond_38_digits_makes_a_double_and_is_logged_once_per_field(
    where: str,
) -> None:
    huge = 10**40 + 1
    polls: list[list[dict[str, object]]] = {
        "new field": [[{"id": huge, "o": {"n": huge}}]],
        "int64 field": [[{"id": 1, "o": {"n": 1}}], [{"id": huge, "o": {"n": huge}}]],
        "decimal field": [[{"id": BIG, "o": {"n": BIG}}], [{"id": huge, "o": {"n": huge}}]],
    }[where]
    polls.append([{"id": huge + 1, "o": {"n": huge}}])
    with capture_logs() as logged:
        results = _decode_polls(_decoder(), polls)
    assert _poison(results) == {}
    assert _types(results, "id")[-1] == pa.float64()
    assert _types(results, "o")[-1] == pa.struct([("n", pa.float64())])
    rounded = [e for e in logged if e["event"] == "json_integer_rounded"]
    at = 0 if where == "new field" else 1
    assert [(e["log_level"], e["topic"], e["offset"], e["field"]) for e in rounded] == [
        ("warning", "t", at, "id"),
        ("warning", "t", at, "o.n"),
    ]


@pytest.mark.parametrize("where", ["one block", "later poll"])
def test_a_declared_int_beyond_int64_stays_poison(where: str) -> None:
    polls = [
        [{"x": v} for v in poll]
        for poll in {"one block": [[1, BIG]], "later poll": [[1], [BIG]]}[where]
    ]
    results = _decode_polls(_decoder(schema={"x": "int"}), polls)
    assert set(_poison(results)) == {1}
    assert f"couldn't parse:{BIG}" in _poison(results)[1]
    assert _types(results, "x") == [pa.int64()]


def test_segments_of_int64_and_decimals_read_as_one_exact_table(tmp_path: Path) -> None:
    results = _decode_polls(_decoder(), [[{"x": 12}, {"x": 7}], [{"x": UINT64_MAX}, {"x": 12}]])
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
        assert types == {"int64", "decimal128(38, 0)"}
        table = store.read("t", columns=["offset", "x"]).to_table()
        assert table.schema.field("x").type == WHOLE
        assert table.column("x").to_pylist() == [Decimal(v) for v in (12, 7, UINT64_MAX, 12)]
        found = store.read("t", columns=["offset"], where={"x": 12}).to_table()
        assert found.column("offset").to_pylist() == [0, 3]
