"""`format: arrow` producers that change a column's type: the decoder accepts exactly the
changes the topic's readers merge (a timestamp's unit or zone, naive or not, a wider number),
before and after a restart, and sends every other change per on_error."""

from __future__ import annotations

import datetime
import itertools
from pathlib import Path

import pyarrow as pa
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from bridge.config import TopicMapping
from bridge.consume.messages import records_of
from bridge.ingest.decode import Decoded, Decoder, decoder_for
from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.schema import FIXED_FIELDS
from plateau_core.schema_merge import merged_schema

UTC = datetime.UTC
PARIS = "Europe/Paris"

# Types a producer may send for one column, top level and nested: every ordered pair of
# them is checked against the readers' merge.
TYPES = [
    pa.null(),
    pa.bool_(),
    pa.int8(),
    pa.int32(),
    pa.int64(),
    pa.uint64(),
    pa.float32(),
    pa.float64(),
    pa.decimal128(10, 2),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.date32(),
    pa.timestamp("s"),
    pa.timestamp("ms"),
    pa.timestamp("us", tz="UTC"),
    pa.timestamp("ns", tz=PARIS),
    pa.list_(pa.int32()),
    pa.list_(pa.float64()),
    pa.list_(pa.timestamp("ms")),
    pa.list_(pa.timestamp("us", tz="UTC")),
    pa.struct([("t", pa.timestamp("ms"))]),
    pa.struct([("t", pa.timestamp("ms", tz="UTC")), ("n", pa.float32())]),
    pa.struct([("t", pa.string())]),
    pa.map_(pa.string(), pa.timestamp("ms")),
    pa.map_(pa.string(), pa.timestamp("ns", tz=PARIS)),
]


def _message(offset: int, value: bytes) -> Message:
    return Message(
        topic="t",
        partition=0,
        offset=offset,
        value=value,
        timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000),
    )


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _of(dtype: pa.DataType) -> bytes:
    return _ipc(pa.table({"a": pa.nulls(1, dtype)}))


def _decoder(seeded: pa.Schema | None = None) -> Decoder:
    decoder = decoder_for(TopicMapping(source="t", format="arrow"))
    if seeded is not None:
        decoder.seed(seeded)
    return decoder


def _decode(decoder: Decoder, *values: bytes, start: int = 0) -> Decoded:
    return decoder.decode(records_of([_message(start + i, v) for i, v in enumerate(values)]))


def _stored(*types: pa.DataType) -> list[pa.Schema]:
    return [pa.schema([*FIXED_FIELDS, pa.field("a", t)]) for t in types]


def _landed(decoded: Decoded) -> list[int]:
    return sorted(o for b in decoded.batches for o in b.column("offset").to_pylist())


def test_the_decoder_accepts_exactly_the_type_changes_the_readers_merge() -> None:
    """A column first sent as one type and then as another lands when the readers merge
    the two types into one (`merged_schema` without a clash, which would read as text), and
    goes per on_error otherwise; a restarted decoder, seeded with what the readers merge,
    decides the same, and takes both types again once both landed."""
    wrong = []
    for first, then in itertools.product(TYPES, repeat=2):
        merged = merged_schema(_stored(first, then))
        merges = not merged.clashes
        decoded = _decode(_decoder(), _of(first), _of(then))
        restarted = _decode(_decoder(merged_schema(_stored(first)).settled()), _of(then))
        if _landed(decoded) != ([0, 1] if merges else [0]) or bool(restarted.poison) == merges:
            wrong.append(f"{first} then {then}: readers merge: {merges}")
        if merges:
            again = _decode(_decoder(merged.settled()), _of(first), _of(then))
            if again.poison:
                wrong.append(f"{first} and {then} stored, after a restart: {again.poison}")
    assert wrong == []


def test_a_timestamp_column_that_changes_unit_or_zone_lands_as_sent() -> None:
    """Naive, then in UTC, then in another zone, then naive again, in other units, at the
    top level as inside a struct, list and map: every message lands with its own types
    (the readers merge them); a column that turns into text still goes per on_error."""
    kinds = [("ms", None), ("us", "UTC"), ("s", PARIS), ("ns", None)]
    values = [_ipc(_times(unit, tz, datetime.datetime(2024, 1, 1, 12))) for unit, tz in kinds]
    text = _times("ms", None, datetime.datetime(2024, 1, 1, 12)).set_column(
        0, "at", pa.array(["2024-01-01T12:00:00Z"])
    )
    values.append(_ipc(text))
    decoded = _decode(_decoder(), *values)
    assert _landed(decoded) == [0, 1, 2, 3]
    assert "'at' is string, the topic's is timestamp[us, tz=UTC]" in decoded.poison[0].error
    assert "'o'" not in decoded.poison[0].error  # only the column that does not merge
    sent = [b.schema.field("at").type for b in decoded.batches]
    assert sent == [pa.timestamp(unit, tz) for unit, tz in kinds]


def _times(unit: str, tz: str | None, when: datetime.datetime) -> pa.Table:
    """`when` (naive: a UTC time) in a column `at` of timestamp[unit, tz], and inside a
    struct, a list and a map of that type."""
    dtype = pa.timestamp(unit, tz)
    value = when if tz is None else when.replace(tzinfo=UTC)
    return pa.table(
        {
            "at": pa.array([value], dtype),
            "o": pa.array([{"t": value}], pa.struct([("t", dtype)])),
            "l": pa.array([[value]], pa.list_(dtype)),
            "m": pa.array([[("k", value)]], pa.map_(pa.string(), dtype)),
        }
    )


def test_naive_timestamps_land_after_a_restart_seeded_with_the_merged_utc_column(
    tmp_path: Path,
) -> None:
    """A topic whose segments hold a timestamp column naive and in UTC reads it in UTC, and
    a restarted decoder is seeded with that: the naive producer's records, which landed
    before the restart, went per on_error after it. They land, and every row reads as
    the instant it was sent as, naive values taken as UTC."""
    noon = datetime.datetime(2024, 1, 1, 12)
    first = [_times("ms", None, noon), _times("us", "UTC", noon + datetime.timedelta(hours=1))]
    after = [_times("ms", None, noon + datetime.timedelta(hours=2)), _times("s", PARIS, noon)]
    with Store.open(tmp_path / "data") as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
            decoded = _decode(_decoder(), *map(_ipc, first))
            assert not decoded.poison
            for batch in decoded.batches:
                writer.append("t", 0, batch)
            writer.flush()
            merged = merged_schema(store.manifest.schemas("t").values())
            assert merged.clashes == {}
            assert merged.schema.field("at").type == pa.timestamp("us", tz="UTC")
            restarted = _decoder(merged.settled())
            decoded = _decode(restarted, *map(_ipc, after), start=2)
            assert not decoded.poison
            for batch in decoded.batches:
                writer.append("t", 0, batch)
            writer.flush()
        finally:
            writer.close()
        table = store.read("t", columns=["offset", "at", "o", "l", "m"]).to_table()
    hours = [12, 13, 14, 12]
    instants = [noon.replace(tzinfo=UTC) + datetime.timedelta(hours=h - 12) for h in hours]
    assert table.to_pylist() == [
        {"offset": i, "at": t, "o": {"t": t}, "l": [t], "m": [("k", t)]}
        for i, t in enumerate(instants)
    ]
