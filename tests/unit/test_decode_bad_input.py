"""Decoders on bad input, without a broker: every message ends as rows or as poison with a
reason, never as an exception (which would stop the worker whatever on_error says) or a
crash. tests/reliability/test_bad_input.py runs the same cases end to end."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from bridge.config import TopicMapping
from bridge.consume.messages import records_of
from bridge.ingest.decode import Decoded, decoder_for
from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.schema_merge import merged_schema
from plateau_core.stored_names import stored_name


def _decode(mapping: dict[str, object], values: list[bytes | None]) -> Decoded:
    decoder = decoder_for(TopicMapping.model_validate({"source": "t", **mapping}))
    return decoder.decode(records_of([_message(i, v) for i, v in enumerate(values)]))


def _message(offset: int, value: bytes | None) -> Message:
    return Message(
        topic="t",
        partition=0,
        offset=offset,
        value=value,
        timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000),
    )


def _poison(decoded: Decoded) -> dict[int, str]:
    return {p.offset: p.error for p in decoded.poison}


def _rows(decoded: Decoded) -> int:
    return sum(b.num_rows for b in decoded.batches)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


@pytest.mark.parametrize("document", [b"null", b"3", b'"s"', b"[1, 2]", b"true"])
def test_json_documents_that_are_not_objects_are_poison(document: bytes) -> None:
    # A block holding only `null` crashed Arrow's JSON reader (a segfault); next to other
    # rows it became a row of nulls.
    alone = _decode({"format": "json"}, [document])
    assert _rows(alone) == 0 and "not a JSON object" in _poison(alone)[0]
    mixed = _decode({"format": "json"}, [b'{"a": 1}', document, b'{"a": 2}'])
    assert _rows(mixed) == 2 and set(_poison(mixed)) == {1}


def test_json_field_first_seen_as_null_takes_the_first_type_it_gets() -> None:
    decoder = decoder_for(TopicMapping(source="t", format="json"))
    values = [b'{"f": null, "g": []}', b'{"f": 5, "g": [1]}', b'{"f": "x"}']
    results = [decoder.decode(records_of([_message(i, v)])) for i, v in enumerate(values)]
    assert [_rows(r) for r in results] == [1, 1, 0]
    assert results[1].batches[0].schema.field("f").type == pa.int64()


def test_json_seeded_decoder_refuses_a_type_change_after_a_restart() -> None:
    decoder = decoder_for(TopicMapping(source="t", format="json"))
    decoder.seed(pa.schema([("offset", pa.int64()), ("f", pa.int64()), ("offset_", pa.string())]))
    decoded = decoder.decode(
        records_of([_message(0, b'{"f": "x"}'), _message(1, b'{"f": 2, "offset": "o"}')])
    )
    assert set(_poison(decoded)) == {0} and _rows(decoded) == 1


def test_arrow_stream_truncated_anywhere_is_poison_or_complete() -> None:
    table = pa.table({"n": list(range(6))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=2)
    whole = bytes(sink.getvalue().to_pybytes())
    empty = 0
    for cut in range(len(whole)):
        decoded = _decode({"format": "arrow"}, [whole[:cut]])
        # Cut at a batch boundary the stream is a shorter valid one; anywhere else, poison.
        assert _rows(decoded) in (0, 2, 4, 6)
        assert not (decoded.poison and _rows(decoded))
        empty += not decoded.poison and not _rows(decoded)
    assert empty == 1  # the schema alone: a valid stream of no rows, nothing to land


@pytest.mark.parametrize(
    ("table", "why"),
    [
        (pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"]), "duplicate"),
        (pa.table({"u": pa.array(["a"]).dictionary_encode()}), "unsupported"),
        (pa.table({"d": pa.array([1], pa.duration("s"))}), "unsupported"),
        (pa.table({"key": [1], "key_": [2]}), "both present"),
    ],
)
def test_arrow_columns_plateau_cannot_store_are_poison(table: pa.Table, why: str) -> None:
    decoded = _decode({"format": "arrow"}, [_ipc(pa.table({"a": [1]})), _ipc(table)])
    assert _rows(decoded) == 1 and why in _poison(decoded)[1]


def test_arrow_column_that_changes_type_is_poison() -> None:
    values = [
        _ipc(pa.table({"a": pa.array([1], pa.int64())})),
        _ipc(pa.table({"a": ["one"]})),
        _ipc(pa.table({"a": pa.array([2], pa.int32())})),  # widens to the topic's int64
        _ipc(pa.table({"b": [1.5]})),  # a new column
    ]
    decoded = _decode({"format": "arrow"}, values)
    assert _rows(decoded) == 3
    assert "'a' is string, the topic's is int64" in _poison(decoded)[1]


def test_random_bytes_never_raise() -> None:
    rng = random.Random(7)
    for fmt in ("json", "arrow"):
        values: list[bytes | None] = [rng.randbytes(rng.randrange(1, 300)) for _ in range(300)]
        values += [b"\xff\xff\xff\xff" + rng.randbytes(40) for _ in range(50)]
        values += [json.dumps({"n": 1}).encode(), None]
        decoded = _decode({"format": fmt}, values)
        assert _rows(decoded) + len(decoded.poison) >= len(values) - 1


def test_json_strings_that_are_not_utf8_are_poison() -> None:
    # Arrow's reader let them into a string column, and every seal then failed for good.
    decoded = _decode(
        {"format": "json"}, [b'{"n": 1}', b'{"name": "caf\xe9", "n": 2}', b'{"n": 3}']
    )
    assert _rows(decoded) == 2 and "not UTF-8" in _poison(decoded)[1]
    assert decoded.batches[0].column("n").to_pylist() == [1, 3]


@pytest.mark.parametrize("depth", [61, 20_000])
@pytest.mark.parametrize("pretty", [False, True], ids=["one-line", "pretty"])
def test_json_nested_too_deep_is_poison(depth: int, pretty: bool) -> None:
    # Arrow's IPC writer refuses 64 levels at the seal, and 20,000 in one line crashed the
    # process inside Arrow's reader (a RecursionError in json.loads when pretty-printed).
    nested = "[" * depth + "1" + "]" * depth
    document = f'{{"a":{nested}}}' if not pretty else f'{{\n "a": {nested}\n}}'
    decoded = _decode({"format": "json"}, [document.encode(), b'{"a": [1]}'])
    assert "nested deeper than 60" in _poison(decoded)[0]
    assert _rows(decoded) == 1


def test_json_nested_to_the_limit_lands() -> None:
    nested = "[" * 58 + "1" + "]" * 58
    decoded = _decode({"format": "json"}, [f'{{"a":{{"b":{nested}}}}}'.encode()])
    assert _rows(decoded) == 1 and decoded.poison == []


def test_event_times_as_iso_8601_text_land() -> None:
    decoded = _decode(
        {"format": "json", "timestamp": "field:ts"},
        [
            b'{"ts": "2024-01-01T12:00:00.123Z"}',
            b'{"ts": "2024-01-01T14:00:00.5+02:00"}',
            b'{"ts": "soon"}',
            b'{"ts": "2024-01-01T12:00:00"}',
        ],
    )
    stamps = [t.isoformat() for t in decoded.batches[0].column("timestamp").to_pylist()]
    assert stamps == ["2024-01-01T12:00:00.123000+00:00", "2024-01-01T12:00:00.500000+00:00"]
    assert set(_poison(decoded)) == {2, 3}
    assert "ISO 8601 with a zone" in _poison(decoded)[3]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e300", "1700000000000000"])
def test_event_times_out_of_range_are_poison(value: str) -> None:
    # Stored before as dates no reader can show (and plateau status failed on them):
    # NaN became -2^63 ms, epoch microseconds the year 55840.
    decoded = _decode(
        {"format": "json", "timestamp": "field:t"},
        [b'{"t": 1700000000000}', f'{{"t": {value}}}'.encode()],
    )
    assert _rows(decoded) == 1 and "between years 1 and 9999" in _poison(decoded)[1]


def test_json_field_named_like_plateaus_and_its_renamed_twin_is_poison() -> None:
    # `offset` is stored as `offset_`: with a field `offset_` too, one value was lost.
    decoded = _decode(
        {"format": "json"}, [b'{"offset": 1, "offset_": 2}', b'{"offset_": 3}', b'{"n": 4}']
    )
    assert "both present" in _poison(decoded)[0]
    assert decoded.batches[0].column("offset_").to_pylist() == [3, None]


@pytest.mark.parametrize("fmt", ["json", "arrow"])
def test_fields_named_like_plateaus_columns_in_any_case_get_the_suffix(fmt: str) -> None:
    # Spark resolves names ignoring case: a column `Timestamp` beside plateau's `timestamp`
    # made every reference to either ambiguous, and `partition` is the column readers add.
    fields = {"Timestamp": 1, "OFFSET": 2, "Key": "k", "headers": 3, "partition": 4, "n": 5}
    value = (
        json.dumps(fields).encode()
        if fmt == "json"
        else _ipc(pa.table({k: [v] for k, v in fields.items()}))
    )
    decoded = _decode({"format": fmt}, [value])
    assert _poison(decoded) == {}
    (row,) = decoded.batches[0].to_pylist()
    own = ("offset", "timestamp", "key", "headers")
    assert {k: v for k, v in row.items() if k not in own} == {
        "Timestamp_": 1,
        "OFFSET_": 2,
        "Key_": "k",
        "headers_": 3,
        "partition_": 4,
        "n": 5,
    }


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("PARTITION", "PARTITION_"),
        ("\u212aey", "\u212aey_"),  # KELVIN SIGN: Java's equalsIgnoreCase takes it for k
        ("t\u0130mestamp", "t\u0130mestamp_"),  # dotted capital I, as Java folds it
        ("header\u017f", "header\u017f_"),  # long s
        ("of\ufb00set", "of\ufb00set"),  # a ligature Java does not fold: a name of its own
        ("offsets", "offsets"),
        ("offset_", "offset_"),
    ],
)
def test_names_clash_as_sparks_resolver_compares_them(name: str, stored: str) -> None:
    assert stored_name(name) == stored


@pytest.mark.parametrize("fmt", ["json", "arrow"])
def test_a_field_in_any_case_and_its_renamed_twin_is_poison(fmt: str) -> None:
    def value(fields: dict[str, int]) -> bytes:
        if fmt == "json":
            return json.dumps(fields).encode()
        return _ipc(pa.table({k: [v] for k, v in fields.items()}))

    decoded = _decode(
        {"format": fmt},
        [value({"Partition": 1, "Partition_": 2}), value({"Partition_": 3}), value({"n": 4})],
    )
    assert "both present" in _poison(decoded)[0] and _rows(decoded) == 2
    rows = [r for b in decoded.batches for r in b.to_pylist()]
    assert {r["offset"]: r.get("Partition_") for r in rows} == {1: 3, 2: None}
    assert all("Partition" not in r for r in rows)


def test_a_seeded_decoder_maps_suffixed_columns_of_any_case_back_to_their_fields() -> None:
    decoder = decoder_for(TopicMapping(source="t", format="json"))
    decoder.seed(
        pa.schema([("offset", pa.int64()), ("timestamp", pa.int64()), ("Timestamp_", pa.int64())])
    )
    decoded = decoder.decode(records_of([_message(0, b'{"Timestamp": "x"}')]))
    assert "changed from number to string" in _poison(decoded)[0]


def test_declared_timestamps_take_epoch_milliseconds_as_well_as_iso_8601() -> None:
    """A declared `timestamp` field takes what `timestamp: field:` takes: epoch milliseconds
    (were poison) or ISO 8601 text, mixed in one batch too."""
    mapping = {"format": "json", "schema": {"ts": "timestamp", "n": "int"}}
    values = [
        b'{"ts": 1704110400123, "n": 0}',
        b'{"ts": 1704110400500.0, "n": 1}',
        b'{"ts": "2024-01-01T12:00:01.5Z", "n": 2}',
        b'{"ts": 1e300, "n": 3}',
        b'{"ts": null, "n": 4}',
        b'{"ts": 1704110402000, "n": 5}',
    ]
    for field in (None, "field:ts"):
        decoded = _decode({**mapping, **({"timestamp": field} if field else {})}, values)
        rows = [r for b in decoded.batches for r in b.to_pylist()]
        stamps = {r["n"]: r["ts"] and r["ts"].isoformat() for r in rows}
        assert stamps == {
            0: "2024-01-01T12:00:00.123000+00:00",
            1: "2024-01-01T12:00:00.500000+00:00",
            2: "2024-01-01T12:00:01.500000+00:00",
            5: "2024-01-01T12:00:02+00:00",
            **({} if field else {4: None}),
        }
        assert "between years 1 and 9999" in _poison(decoded)[3]
        if field:
            assert [r["timestamp"] for r in rows] == [r["ts"] for r in rows]


def test_a_json_field_two_workers_inferred_differently_reads_as_text(tmp_path: Path) -> None:
    """Two workers (two stores on one data folder, as `serve --workers 2` runs them) each see
    a new field first, as a number in one partition and as text in the other: both land, and
    every read of the topic failed. It reads as a text column; the next worker to start is
    seeded with the other columns and goes on."""
    lines = {0: [b'{"id": 1, "user": 42}'], 1: [b'{"id": 2, "user": "ann"}']}
    for partition, values in lines.items():
        store = Store.open(tmp_path / "data")
        decoder = decoder_for(TopicMapping(source="t", format="json"))
        decoded = decoder.decode(records_of([_message(0, v) for v in values]))
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("t", partition, roll=RollPolicy(max_age_s=3600))
            for batch in decoded.batches:
                writer.append("t", partition, batch)
            writer.flush()
        finally:
            writer.close()
            store.close()
    store = Store.open(tmp_path / "data")
    table = store.read("t", columns=["id", "user"]).to_table()
    assert sorted(table.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "user": "42"},
        {"id": 2, "user": "ann"},
    ]
    merged = merged_schema(store.manifest.schemas("t").values())
    decoder = decoder_for(TopicMapping(source="t", format="json"))
    decoder.seed(merged.settled())
    decoded = decoder.decode(records_of([_message(1, b'{"id": "three", "user": 3}')]))
    assert set(_poison(decoded)) == {1}  # `id` is stored as int64 everywhere
    store.close()


def test_a_store_sealed_before_the_suffix_reads_old_and_new_values_in_one_column(
    tmp_path: Path,
) -> None:
    """A segment sealed before `Timestamp` took the suffix keeps it as `Timestamp`, which
    reads as `Timestamp_` (plateau_core.stored_names): the topic has one column for the
    field, and a restarted worker still checks the field's type against the old column."""
    old = pa.RecordBatch.from_pydict(
        {
            "offset": pa.array([0], pa.int64()),
            "timestamp": pa.array([1_700_000_000_000_000], pa.timestamp("us", tz="UTC")),
            "Timestamp": pa.array([10], pa.int64()),
        }
    )
    with Store.open(tmp_path / "data") as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
            writer.append("t", 0, old)
            writer.flush()
            decoder = decoder_for(TopicMapping(source="t", format="json"))
            decoder.seed(merged_schema(store.manifest.schemas("t").values()).settled())
            decoded = decoder.decode(
                records_of([_message(1, b'{"Timestamp": 11}'), _message(2, b'{"Timestamp": "x"}')])
            )
            assert set(_poison(decoded)) == {2}
            for batch in decoded.batches:
                writer.append("t", 0, batch)
            writer.flush()
        finally:
            writer.close()
        table = store.read("t", columns=["offset", "Timestamp_"]).to_table()
    assert table.to_pylist() == [{"offset": 0, "Timestamp_": 10}, {"offset": 1, "Timestamp_": 11}]


def test_inferred_json_text_that_looks_like_a_time_stays_text() -> None:
    """Arrow's reader types text like `2024-01-01` or `...T10:00:00Z` as timestamp[s]: a
    field whose first value had whole seconds (as Python's isoformat writes them) made every
    later value with fractions of a second, or any other text, poison."""
    decoder = decoder_for(TopicMapping(source="t", format="json"))
    values = [
        b'{"at": "2024-01-01T10:00:00+00:00", "o": {"d": "2024-01-01"}, "l": ["2024-01-01"]}',
        b'{"at": "2024-01-01T10:00:00.250000+00:00", "o": {"d": "soon"}, "l": ["later"]}',
        b'{"at": "not yet"}',
    ]
    results = [decoder.decode(records_of([_message(i, v)])) for i, v in enumerate(values)]
    assert [_poison(r) for r in results] == [{}, {}, {}]
    rows = [r for result in results for b in result.batches for r in b.to_pylist()]
    assert [(r["at"], r.get("o"), r.get("l")) for r in rows] == [
        ("2024-01-01T10:00:00+00:00", {"d": "2024-01-01"}, ["2024-01-01"]),
        ("2024-01-01T10:00:00.250000+00:00", {"d": "soon"}, ["later"]),
        ("not yet", None, None),
    ]


def test_event_times_of_an_inferred_json_topic_take_fractions_and_need_a_zone() -> None:
    decoder = decoder_for(TopicMapping(source="t", format="json", timestamp="field:ts"))
    values = [
        b'{"ts": "2024-01-01T10:00:00Z"}',
        b'{"ts": "2024-01-01T10:00:00.500Z"}',
        b'{"ts": "2024-01-01T10:00:01"}',
    ]
    results = [decoder.decode(records_of([_message(i, v)])) for i, v in enumerate(values)]
    rows = [r for result in results for b in result.batches for r in b.to_pylist()]
    assert [r["timestamp"].isoformat() for r in rows] == [
        "2024-01-01T10:00:00+00:00",
        "2024-01-01T10:00:00.500000+00:00",
    ]
    assert "not ISO 8601 with a zone" in _poison(results[2])[2]
