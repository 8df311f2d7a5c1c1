"""Bad input: what producers can put in a topic that plateau cannot land as it is.

Each case ends with a clear outcome per the topic's `on_error` (dlq: the original bytes and
the reason in the dead-letter topic; skip: a log line; fail: the worker stops right before
the record, naming topic, partition and offset, and nothing past it is committed), the
worker still up for dlq and skip (records produced afterwards land), and every other record
stored exactly once. docs/bridge.md ("Bad input") describes the behaviour these tests pin.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from structlog.testing import capture_logs

from bridge.config import Config, parse_config
from bridge.demo.producer import Record, produce
from bridge.errors import BridgeError, ConfigError
from bridge.ingest.records import ERROR_HEADERS
from bridge.local_kafka import free_port
from bridge.local_kafka.topics import create_topic
from bridge.serve import EXIT_POISON, serve
from tests.bridge_support import (
    committed,
    end_offsets,
    get,
    make_config,
    serving,
    stored,
    wait_landed,
    wait_readyz,
    with_metrics,
)
from tests.reliability.support import Recorder

TopicFactory = Callable[..., str]
BIG = 8 * 1024 * 1024  # above Kafka's 1 MB default, far above the roll and memory limits below
BIG_LIMIT = {"max.message.bytes": str(16 * 1024 * 1024)}
SEED = 20_240_611


# --- helpers ---------------------------------------------------------------------------------


def _arrow(start: int, rows: int = 1) -> bytes:
    """An Arrow IPC stream; one row by default, as the audit counts rows per offset."""
    table = pa.table({"n": pa.array(range(start, start + rows), pa.int64())})
    return _ipc(table)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=2)  # several record batches per stream
    return bytes(sink.getvalue().to_pybytes())


def _json(n: int, **extra: object) -> bytes:
    return json.dumps({"n": n, **extra}).encode()


def _good(fmt: str, n: int) -> bytes:
    return _arrow(n) if fmt == "arrow" else _json(n)


def _garbage(rng: random.Random, size: int) -> bytes:
    data = bytes(rng.randrange(256) for _ in range(size))
    # Neither a JSON object nor an Arrow continuation marker by accident.
    return b"\x00" + data


def _dead_letters(kafka: str, topic: str, count: int, timeout_s: float = 30.0) -> list[Message]:
    """The first `count` records of `topic`, waiting up to `timeout_s` for them."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"dlq-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in end_offsets(kafka, topic)])
    letters: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(letters) < count and time.monotonic() < deadline:
            letters += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    assert len(letters) >= count, f"{topic}: {len(letters)} dead letters, expected {count}"
    return sorted(letters, key=lambda m: (m.partition() or 0, m.offset() or 0))


def _reason(letter: Message) -> str:
    headers = dict(letter.headers() or [])
    return bytes(headers[ERROR_HEADERS[3]] or b"").decode()


def _check_letters(
    letters: list[Message], source: str, sent: Mapping[int, bytes | None], why: str
) -> None:
    """Each dead letter holds the original value and names where it came from and why."""
    by_offset = {int(dict(m.headers() or [])[ERROR_HEADERS[2]] or b"-1"): m for m in letters}
    assert set(by_offset) == set(sent)
    for offset, value in sent.items():
        letter = by_offset[offset]
        headers = dict(letter.headers() or [])
        assert letter.value() == value
        assert headers[ERROR_HEADERS[0]] == source.encode()
        assert headers[ERROR_HEADERS[1]] == b"0"
        assert why in _reason(letter), _reason(letter)


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def _serve_to_exit(config: Config, timeout_s: float = 60.0) -> int | BaseException:
    """serve() until it returns by itself (a poison stop, an error), or fail the test."""
    stop = threading.Event()
    outcome: dict[str, int | BaseException] = {}

    def run() -> None:
        try:
            outcome["code"] = serve(config, 1, stop)
        except BaseException as exc:
            outcome["code"] = exc

    thread = threading.Thread(target=run, name="serve-to-exit", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        stop.set()
        thread.join(60)
        pytest.fail(f"serve did not stop by itself within {timeout_s}s")
    return outcome["code"]


def _produce(kafka: str, topic: str, values: Iterable[bytes | None], **records: Any) -> int:
    return produce(
        kafka,
        topic,
        (Record(value=v, partition=0, **records) for v in values),
        **{"message.max.bytes": 20 * 1024 * 1024},
    )


def _group(topic: str) -> str:
    return f"g-{topic}"


# --- random bytes ----------------------------------------------------------------------------


@pytest.mark.parametrize("on_error", ["dlq", "skip", "fail"])
@pytest.mark.parametrize("fmt", ["json", "arrow"])
def test_random_bytes(
    kafka: str,
    topic_factory: TopicFactory,
    tmp_path: Path,
    reliability: Recorder,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
    on_error: str,
) -> None:
    rng = random.Random(SEED)
    topic = topic_factory(partitions=1)
    mapping: dict[str, Any] = {"source": topic, "format": fmt, "on_error": on_error}
    if on_error == "dlq":
        mapping["dlq"] = topic_factory(partitions=1)
    bad = {5: _garbage(rng, 1), 12: _garbage(rng, 300), 13: _garbage(rng, 4000)}
    values = [bad.get(i, _good(fmt, i)) for i in range(20)]
    produced = _produce(kafka, topic, values)
    config = make_config(kafka, tmp_path, [mapping], group=_group(topic))
    scenario = f"Random bytes, {fmt} topic, on_error {on_error}"
    if on_error == "fail":
        with capture_logs() as logs:
            code = _serve_to_exit(config)
        assert code == EXIT_POISON, code
        stops = [e for e in logs if e["event"] == "worker_stopped_on_poison"]
        assert len(stops) == 1, logs
        assert f"{topic}[0] offset 5 cannot be decoded" in stops[0]["error"], stops[0]
        # Committed only up to the poison record: it is the first one read on the next start.
        assert committed(kafka, _group(topic), topic, 1) == {0: 5}
        reliability.check(
            scenario,
            "20 records, random bytes at offsets 5, 12, 13",
            tmp_path,
            topic,
            {0: range(5)},
            produced=produced,
            outcome="stopped before offset 5 (exit 3), committed 5, records before it once",
            exit_code=code,
        )
        return
    with serving(config):
        wait_landed(tmp_path, topic, {0: 20})
        # Still consuming: records produced after the poison land too.
        produced += _produce(kafka, topic, [_good(fmt, i) for i in range(20, 25)])
        wait_landed(tmp_path, topic, {0: 25})
        if on_error == "dlq":
            letters = _dead_letters(kafka, mapping["dlq"], len(bad))
    assert committed(kafka, _group(topic), topic, 1) == {0: 25}
    why = "not an Arrow IPC stream" if fmt == "arrow" else "not"
    if on_error == "dlq":
        _check_letters(letters, topic, bad, why)
    else:
        assert capsys.readouterr().out.count("record_skipped") == len(bad)
    reliability.check(
        scenario,
        "20 records, random bytes (1 to 4001 bytes) at offsets 5, 12, 13, then 5 more",
        tmp_path,
        topic,
        {0: set(range(25)) - set(bad)},
        produced=produced,
        outcome=f"3 {'sent to the DLQ' if on_error == 'dlq' else 'skipped'}, rest exactly once",
        poison=len(bad),
    )


# --- truncated Arrow streams -----------------------------------------------------------------


def test_truncated_arrow_streams(
    kafka: str, topic_factory: TopicFactory, tmp_path: Path, reliability: Recorder
) -> None:
    topic, dlq = topic_factory(partitions=1), topic_factory(partitions=1)
    whole = _arrow(1000, rows=6)  # 3 record batches
    end_marker = 8  # the stream's end-of-stream marker: continuation token and a zero length
    cuts = {2: 1, 4: 8, 6: len(whole) // 2, 8: len(whole) - end_marker - 1, 10: len(whole) - 3}
    values = [_arrow(i) for i in range(14)]
    for offset, cut in cuts.items():
        values[offset] = whole[:cut]
    # Cut right before the end marker: every batch is complete, the stream is shorter only
    # by its optional trailer, and it lands.
    values[12] = _arrow(12)[:-end_marker]
    produced = _produce(kafka, topic, values)
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic, "format": "arrow", "on_error": "dlq", "dlq": dlq}],
        group=_group(topic),
    )
    with serving(config):
        wait_landed(tmp_path, topic, {0: 14})
        letters = _dead_letters(kafka, dlq, len(cuts))
    _check_letters(letters, topic, {o: values[o] for o in cuts}, "not an Arrow IPC stream")
    table = stored(tmp_path, topic)
    assert dict(zip(table["offset"].to_pylist(), table["n"].to_pylist(), strict=True))[12] == 12
    reliability.check(
        "Truncated Arrow IPC streams",
        "14 streams; 5 cut inside a message (header, metadata, body), 1 cut before the "
        "end-of-stream marker",
        tmp_path,
        topic,
        {0: set(range(14)) - set(cuts)},
        produced=produced,
        outcome="5 sent to the DLQ with their bytes, the stream without trailer landed, "
        "rest exactly once",
        poison=len(cuts),
    )


# --- oversized messages ----------------------------------------------------------------------


def test_oversized_messages(
    kafka: str, topic_factory: TopicFactory, tmp_path: Path, reliability: Recorder
) -> None:
    """plateau has no record size limit of its own: what Kafka let through lands, even when
    one record is bigger than the roll's max_bytes and the worker's whole memory budget."""
    rng = random.Random(SEED)
    raw, as_json, arrow = (topic_factory(partitions=1, **BIG_LIMIT) for _ in range(3))
    dlq = topic_factory(partitions=1, **BIG_LIMIT)
    blob = rng.randbytes(BIG)
    huge_json = _json(1, text="x" * BIG)
    huge_arrow = _ipc(pa.table({"n": [1], "blob": [blob]}))
    huge_garbage = b"\x00" + blob
    sent = {
        raw: [b"small-0", blob, b"small-2", blob, b"small-4"],
        as_json: [_json(0), huge_json, _json(2), huge_garbage, _json(4)],
        arrow: [_arrow(0), huge_arrow, _arrow(2), huge_garbage, _arrow(4)],
    }
    produced = {topic: _produce(kafka, topic, values) for topic, values in sent.items()}
    config = make_config(
        kafka,
        tmp_path,
        [
            {"source": raw},
            {"source": as_json, "format": "json", "on_error": "dlq", "dlq": dlq},
            {"source": arrow, "format": "arrow", "on_error": "dlq", "dlq": dlq},
        ],
        group=_group(raw),
        storage={"memory_budget": "4MiB"},
        roll={"max_bytes": "1MiB"},
    )
    started = time.monotonic()
    with serving(config):
        for topic in sent:
            wait_landed(tmp_path, topic, {0: 5}, timeout_s=90)
        landed_s = time.monotonic() - started
        letters = _dead_letters(kafka, dlq, 2)
    assert [m.value() == huge_garbage for m in letters] == [True, True]
    sources = {dict(m.headers() or [])[ERROR_HEADERS[0]] for m in letters}
    assert sources == {as_json.encode(), arrow.encode()}
    raw_rows = stored(tmp_path, raw).to_pylist()
    assert [r["value"] for r in sorted(raw_rows, key=lambda r: r["offset"])] == sent[raw]
    texts = {r["offset"]: r["text"] for r in stored(tmp_path, as_json).to_pylist()}
    assert len(texts[1]) == BIG and texts[0] is None
    blobs = {r["offset"]: r["blob"] for r in stored(tmp_path, arrow).to_pylist()}
    assert blobs[1] == blob and blobs[0] is None
    for topic, kind, excluded in (
        (raw, "raw", set()),
        (as_json, "json", {3}),
        (arrow, "arrow", {3}),
    ):
        reliability.check(
            f"Oversized messages ({kind})",
            "8 MiB records between small ones; roll max_bytes 1MiB, memory_budget 4MiB, "
            "topic max.message.bytes 16MiB; an 8 MiB undecodable record to the DLQ",
            tmp_path,
            topic,
            {0: set(range(5)) - excluded},
            produced=produced[topic],
            recover_s=landed_s,
            outcome="landed, each in a segment of its own"
            + ("; the undecodable one in the DLQ" if excluded else ""),
        )


# --- null keys and tombstones ----------------------------------------------------------------


def test_null_keys_and_tombstones(
    kafka: str, topic_factory: TopicFactory, tmp_path: Path, reliability: Recorder
) -> None:
    """raw: a tombstone lands as a row with a null value; json: a tombstone is not a JSON
    object, so it goes per on_error (here to the DLQ, as a tombstone with the error headers).
    A null key is just a null `key` in both."""
    raw, as_json, dlq = (topic_factory(partitions=1) for _ in range(3))
    keys = [None if i % 3 == 0 else f"k{i}".encode() for i in range(12)]
    tombstones = {2, 3, 7, 11}
    raw_values = [None if i in tombstones else f"v{i}".encode() for i in range(12)]
    json_values = [None if i in tombstones else _json(i) for i in range(12)]
    produced = 0
    for topic, values in ((raw, raw_values), (as_json, json_values)):
        produced += produce(
            kafka,
            topic,
            [Record(value=v, key=k, partition=0) for v, k in zip(values, keys, strict=True)],
        )
    config = make_config(
        kafka,
        tmp_path,
        [{"source": raw}, {"source": as_json, "format": "json", "on_error": "dlq", "dlq": dlq}],
        group=_group(raw),
    )
    with serving(config):
        wait_landed(tmp_path, raw, {0: 12})
        wait_landed(tmp_path, as_json, {0: 12})
        letters = _dead_letters(kafka, dlq, len(tombstones))
    rows = sorted(stored(tmp_path, raw).to_pylist(), key=lambda r: r["offset"])
    assert [(r["key"], r["value"]) for r in rows] == list(zip(keys, raw_values, strict=True))
    landed = sorted(stored(tmp_path, as_json).to_pylist(), key=lambda r: r["offset"])
    assert [(r["offset"], r["key"]) for r in landed] == [
        (i, keys[i]) for i in range(12) if i not in tombstones
    ]
    _check_letters(letters, as_json, dict.fromkeys(tombstones), "tombstone")
    assert [m.key() for m in letters] == [keys[i] for i in sorted(tombstones)]
    reliability.check(
        "Null keys and tombstones (raw)",
        "12 records, every third key null, 4 null values",
        tmp_path,
        raw,
        {0: range(12)},
        produced=12,
        outcome="all landed; null key and null value kept as nulls",
    )
    reliability.check(
        "Null keys and tombstones (json)",
        "12 records, every third key null, 4 null values; on_error dlq",
        tmp_path,
        as_json,
        {0: set(range(12)) - tombstones},
        produced=produced - 12,
        outcome="tombstones sent to the DLQ (null value, error headers), rest exactly once",
        poison=len(tombstones),
    )


# --- odd headers -----------------------------------------------------------------------------


def test_odd_headers(
    kafka: str, topic_factory: TopicFactory, tmp_path: Path, reliability: Recorder
) -> None:
    """Header values are bytes and land as they are; keys may repeat or be empty, and their
    order is kept. A poison record's headers go to the DLQ unchanged, before plateau's."""
    rng = random.Random(SEED)
    raw, as_json, dlq = (topic_factory(partitions=1) for _ in range(3))
    shapes: list[list[tuple[str, bytes | None]]] = [
        [("bin", b"\xff\xfe\x00\x80"), ("latin", "café".encode("latin-1"))],  # not UTF-8
        [("dup", b"1"), ("dup", b"2"), ("dup", None)],
        [("", b"empty key"), ("", b"")],
        [(f"h{i}", rng.randbytes(8)) for i in range(500)],
        [("ünïcode-këy", b"v"), ("x" * 1000, b"long key")],
    ]
    raw_records = [
        Record(value=f"v{i}".encode(), headers=shape, partition=0)  # type: ignore[arg-type]
        for i, shape in enumerate(shapes)
    ]
    json_records = [
        Record(value=_json(i) if i != 3 else b"\xffnot json", headers=shape, partition=0)  # type: ignore[arg-type]
        for i, shape in enumerate(shapes)
    ]
    produced = produce(kafka, raw, raw_records) + produce(kafka, as_json, json_records)
    config = make_config(
        kafka,
        tmp_path,
        [{"source": raw}, {"source": as_json, "format": "json", "on_error": "dlq", "dlq": dlq}],
        group=_group(raw),
    )
    with serving(config):
        wait_landed(tmp_path, raw, {0: len(shapes)})
        wait_landed(tmp_path, as_json, {0: len(shapes)})
        letters = _dead_letters(kafka, dlq, 1)
    for topic in (raw, as_json):
        rows = {r["offset"]: r for r in stored(tmp_path, topic).to_pylist()}
        for offset, shape in enumerate(shapes):
            if topic == as_json and offset == 3:
                assert offset not in rows
                continue
            assert [(h["key"], h["value"]) for h in rows[offset]["headers"]] == shape
    letter_headers = letters[0].headers() or []
    assert letter_headers[: len(shapes[3])] == shapes[3]
    assert [k for k, _ in letter_headers[len(shapes[3]) :]] == list(ERROR_HEADERS)
    reliability.check(
        "Odd headers (raw)",
        "non-UTF-8 values, duplicate keys, empty keys, null values, 500 headers, long keys",
        tmp_path,
        raw,
        {0: range(len(shapes))},
        produced=len(shapes),
        outcome="all landed with headers byte for byte, in order",
    )
    reliability.check(
        "Odd headers (json, one poison)",
        "the same headers on a json topic; the record with 500 headers is not JSON",
        tmp_path,
        as_json,
        {0: set(range(len(shapes))) - {3}},
        produced=produced - len(shapes),
        outcome="poison sent to the DLQ with its 500 headers, rest exactly once",
        poison=1,
    )


# --- a JSON field that changes type ----------------------------------------------------------


def test_json_field_changes_type(
    kafka: str, topic_factory: TopicFactory, tmp_path: Path, reliability: Recorder
) -> None:
    """A field keeps the type it was first seen with (declared or inferred): a record where
    it is something else is poison, before and after a restart, so that the topic's
    segments always read as one table. An inferred int that meets a fraction becomes a
    double instead, before a restart and after it; a declared int refuses it. A field
    first seen as null takes the first type it has a value of."""
    inferred, declared, late_typed, dlq = (topic_factory(partitions=1) for _ in range(4))
    changes = [
        _json(0, f=1),
        _json(1, f="one"),  # int -> string
        _json(2, f={"g": 1}),  # int -> object
        _json(3, f=2, m=4),
        _json(4, f=None),
        _json(5, f=[1, 2]),  # int -> array
        _json(6, f=3.5),  # int -> float: a double when inferred, poison when declared
        _json(7),
    ]
    poison = {inferred: {1, 2, 5}, declared: {1, 2, 5, 6}}
    nulls_first = [_json(0, f=None, g=[]), _json(1, f=5, g=[1]), _json(2, f=6, g=[])]
    produced = {
        inferred: _produce(kafka, inferred, changes),
        declared: _produce(kafka, declared, changes),
        late_typed: _produce(kafka, late_typed, nulls_first),
    }
    config = make_config(
        kafka,
        tmp_path,
        [
            {"source": inferred, "format": "json", "on_error": "dlq", "dlq": dlq},
            {
                "source": declared,
                "format": "json",
                "schema": {"n": "int", "f": "int"},
                "on_error": "dlq",
                "dlq": dlq,
            },
            {"source": late_typed, "format": "json", "on_error": "dlq", "dlq": dlq},
        ],
        group=_group(inferred),
    )
    with serving(config):
        for topic, count in produced.items():
            wait_landed(tmp_path, topic, {0: count})
    # After a restart the decoders start from the types already stored: f is a double in
    # the inferred topic, and m, stored as an int, meets its first fraction.
    after_restart = [_json(8, f="eight"), _json(9, f=9, m=4.5)]
    for topic in (inferred, declared):
        produced[topic] += _produce(kafka, topic, after_restart)
    with serving(config):
        for topic in (inferred, declared):
            wait_landed(tmp_path, topic, {0: produced[topic]})
        letters = _dead_letters(kafka, dlq, sum(len(p) + 1 for p in poison.values()))
    sent_back = [dict(m.headers() or []) for m in letters]
    for topic in (inferred, declared):
        offsets = {
            int(h[ERROR_HEADERS[2]] or b"")
            for h in sent_back
            if h[ERROR_HEADERS[0]] == topic.encode()
        }
        assert offsets == poison[topic] | {8}
    table = stored(tmp_path, declared)  # every segment reads as one table
    assert table.schema.field("f").type == pa.int64() and "m" not in table.column_names
    assert dict(zip(table["n"].to_pylist(), table["f"].to_pylist(), strict=True)) == {
        0: 1,
        3: 2,
        4: None,
        7: None,
        9: 9,
    }
    table = stored(tmp_path, inferred)
    assert table.schema.field("f").type == pa.float64()
    assert table.schema.field("m").type == pa.float64()
    rows = {r["n"]: (r["f"], r["m"]) for r in table.select(["n", "f", "m"]).to_pylist()}
    assert rows == {
        0: (1.0, None),
        3: (2.0, 4.0),
        4: (None, None),
        6: (3.5, None),
        7: (None, None),
        9: (9.0, 4.5),
    }
    outcomes = {
        inferred: "3 records with another type and 1 after the restart sent to the DLQ; "
        "the int that met a fraction became a double (f before the restart, m after it); "
        "rest exactly once, one readable table",
        declared: "5 records with another type sent to the DLQ (3.5 in the declared int "
        "among them), rest exactly once, one readable table",
    }
    for topic, kind in ((inferred, "inferred"), (declared, "declared")):
        reliability.check(
            f"JSON field changes type ({kind} schema)",
            "f: int, then string, object, array, float; a restart; then string again "
            "(and m: int, then a float after the restart)",
            tmp_path,
            topic,
            {0: set(range(10)) - poison[topic] - {8}},
            produced=produced[topic],
            outcome=outcomes[topic],
            poison=len(poison[topic]) + 1,
        )
    late = stored(tmp_path, late_typed)
    assert late.schema.field("f").type == pa.int64()
    assert sorted(late["f"].to_pylist(), key=lambda v: v or 0) == [None, 5, 6]
    reliability.check(
        "JSON field first seen as null",
        "f null (and g an empty list) in the first record, numbers afterwards",
        tmp_path,
        late_typed,
        {0: range(3)},
        produced=produced[late_typed],
        outcome="all landed; the field took the first type it had a value of",
    )


# --- an arrow column that changes type ---------------------------------------------------------


def _arrow_times(n: int, at: pa.Array, number: pa.Array) -> bytes:
    """Row `n` with the time `at` (as a column and inside a struct) and a number."""
    o = pa.StructArray.from_arrays([at], names=["t"])
    return _ipc(pa.table({"n": pa.array([n], pa.int64()), "at": at, "o": o, "x": number}))


def test_arrow_column_changes_type(
    kafka: str, topic_factory: TopicFactory, tmp_path: Path, reliability: Recorder
) -> None:
    """An arrow column may change as the topic's readers merge it: a timestamp of another
    unit or zone, naive or not, float32 to float64. Those records land, before and after a
    restart (which seeds the decoder with the merged type, a timestamp in UTC); a column
    that turns into text or a number goes per on_error. The topic reads as one table, the
    naive values taken as UTC."""
    topic, dlq = topic_factory(partitions=1), topic_factory(partitions=1)
    noon = 1_704_110_400  # 2024-01-01T12:00:00Z, in seconds

    def stamps(hour: int, unit: str, tz: str | None) -> pa.Array:
        per_second = {"s": 1, "ms": 1_000, "us": 1_000_000}[unit]
        return pa.array([(noon + (hour - 12) * 3600) * per_second], pa.int64()).cast(
            pa.timestamp(unit, tz)
        )

    before = [
        _arrow_times(0, stamps(12, "ms", None), pa.array([0.5], pa.float32())),
        _arrow_times(1, stamps(13, "us", "UTC"), pa.array([1.5], pa.float64())),
        _arrow_times(2, pa.array(["14:00"]), pa.array([2.5], pa.float32())),  # time -> text
        _arrow_times(3, stamps(15, "s", "Europe/Paris"), pa.array([3], pa.int32())),
    ]
    after_restart = [
        _arrow_times(4, stamps(16, "ms", None), pa.array([4.5], pa.float32())),
        _arrow_times(5, pa.array([5], pa.int64()), pa.array([5.5], pa.float64())),  # a number
    ]
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic, "format": "arrow", "on_error": "dlq", "dlq": dlq}],
        group=_group(topic),
    )
    produced = _produce(kafka, topic, before)
    with serving(config):
        wait_landed(tmp_path, topic, {0: produced})
    produced += _produce(kafka, topic, after_restart)
    with serving(config):
        wait_landed(tmp_path, topic, {0: produced})
        letters = _dead_letters(kafka, dlq, 2)
    _check_letters(letters, topic, {2: before[2], 5: after_restart[1]}, "columns changed type")
    assert "'at' is string" in _reason(letters[0]) and "'x'" not in _reason(letters[0])
    table = stored(tmp_path, topic)
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("x").type == pa.float64()
    rows = {r["n"]: r for r in table.select(["n", "at", "o", "x"]).to_pylist()}
    hours = {0: 12, 1: 13, 3: 15, 4: 16}
    assert sorted(rows) == sorted(hours)
    for n, hour in hours.items():
        at = stamps(hour, "us", "UTC")[0].as_py()
        assert rows[n]["at"] == at and rows[n]["o"] == {"t": at}
    assert [rows[n]["x"] for n in sorted(rows)] == [0.5, 1.5, 3.0, 4.5]
    reliability.check(
        "Arrow column changes type",
        "a timestamp naive (ms), in UTC (us), in Europe/Paris (s), then text; a float32 then "
        "float64 and int32; a restart; then naive again, and a number",
        tmp_path,
        topic,
        {0: set(hours)},
        produced=produced,
        outcome="the timestamps and numbers of another unit, zone or width landed and read "
        "as one column (in UTC), before and after the restart; text and a number in the "
        "timestamp column sent to the DLQ; rest exactly once",
        poison=2,
    )


# --- transactions ----------------------------------------------------------------------------


def test_aborted_transactions(
    kafka: str, topic_factory: TopicFactory, tmp_path: Path, reliability: Recorder
) -> None:
    """read_committed (the default): records of aborted transactions never land, committed
    ones all do, and the offsets the transaction markers take do not hold the partition
    back: its watermark and committed offset reach Kafka's end offset and it is not seen as
    stalled."""
    topic = topic_factory(partitions=2)
    producer = Producer(
        {"bootstrap.servers": kafka, "transactional.id": f"txn-{topic}", "linger.ms": 5}
    )
    producer.init_transactions(30)
    delivered: dict[int, dict[int, set[int]]] = {}  # transaction -> partition -> offsets
    errors: list[str] = []

    def report(txn: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(str(err))
                return
            offsets = delivered.setdefault(txn, {}).setdefault(msg.partition() or 0, set())
            offsets.add(msg.offset() or 0)

        return on_delivery

    aborted = {1, 3, 4, 7}  # the last transaction aborts: the partition ends on its marker
    for txn in range(8):
        producer.begin_transaction()
        for i in range(6):
            producer.produce(
                topic, value=f"t{txn}-{i}".encode(), partition=i % 2, on_delivery=report(txn)
            )
        producer.flush(30)
        if txn in aborted:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    assert not errors, errors
    expected: dict[int, set[int]] = {0: set(), 1: set()}
    for txn, partitions in delivered.items():
        if txn not in aborted:
            for partition, offsets in partitions.items():
                expected[partition] |= offsets
    ends = end_offsets(kafka, topic)
    assert all(ends[p] > max(expected[p]) + 1 for p in ends)  # markers and aborts at the end
    port = free_port()
    config = with_metrics(
        make_config(kafka, tmp_path, [{"source": topic}], group=_group(topic)),
        port,
        stall_after=3.0,
    )
    started = time.monotonic()
    with serving(config):
        wait_landed(tmp_path, topic, ends)
        landed_s = time.monotonic() - started
        time.sleep(4)  # longer than stall_after
        body = wait_readyz(port, lambda b: True)
        assert body["ready"] and not body["stalled"], body
        assert get(port, "/healthz")[0] == 200
    assert committed(kafka, _group(topic), topic, 2) == ends
    values = stored(tmp_path, topic)["value"].to_pylist()
    assert not any(v.decode().split("-")[0] in {f"t{t}" for t in aborted} for v in values)
    reliability.check(
        "Aborted transactions (read_committed)",
        f"8 transactions of 6 records over 2 partitions, {len(aborted)} aborted (the last one too)",
        tmp_path,
        topic,
        expected,
        produced=sum(len(o) for p in delivered.values() for o in p.values()),
        recover_s=landed_s,
        outcome="committed records exactly once, aborted ones never; watermark and "
        "committed offset at the end offset, not stalled",
        end_offsets=dict(ends),
    )


# --- hostile topic names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"source": "a", "name": "../../etc"}, "name"),
        ({"source": "a", "name": "/etc/plateau"}, "name"),
        ({"source": "a", "name": "a/b"}, "name"),
        ({"source": "a", "name": "nul\x00byte"}, "name"),
        ({"source": "a", "name": ".."}, "name"),
        ({"source": "a", "name": "."}, "name"),
        ({"source": "a", "name": ""}, "name"),
        ({"source": "a", "name": "x" * 250}, "name"),
        ({"source": "regex:a.*", "name": "../{source}"}, "name"),
        ({"source": "regex:a.*", "name": "{source}/x"}, "name"),
        ({"source": "regex:a.*", "name": "x" * 249 + "{source}"}, "name"),
        ({"source": "../../etc"}, "source"),
        ({"source": "/abs"}, "source"),
        ({"source": ".."}, "source"),
        ({"source": "a\x00"}, "source"),
        ({"source": "a", "on_error": "dlq", "dlq": "../dead"}, "dlq"),
    ],
)
def test_hostile_names_are_refused_at_load(mapping: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"topics": [{"source": "fine"}, mapping]})
    message = str(refused.value)
    assert "topics.1" in message, message
    assert f"topics.1.{key}:" in message or f"topics.1: {key} " in message, message


def test_regex_match_with_an_unusable_plateau_name(
    kafka: str, tmp_path: Path, reliability: Recorder
) -> None:
    """A regex mapping's name is checked at load with the shortest topic; a matching Kafka
    topic long enough to make the plateau topic longer than 249 characters stops the worker
    when it is assigned, with a message naming the mapping's key, before anything of it is
    read."""
    prefix = f"long-{uuid.uuid4().hex[:8]}"
    long_topic = prefix + "-" + "x" * (244 - len(prefix))  # 245 characters
    create_topic(kafka, long_topic, 1)
    produced = _produce(kafka, long_topic, [b"r0", b"r1"])
    config = make_config(
        kafka,
        tmp_path,
        [{"source": f"regex:{prefix}-.*", "name": "landed-{source}"}],
        group=f"g-{prefix}",
    )
    outcome = _serve_to_exit(config)
    assert isinstance(outcome, BridgeError), outcome
    assert "topics.0.name 'landed-{source}'" in str(outcome), outcome
    assert "at most 249" in str(outcome), outcome
    assert committed(kafka, f"g-{prefix}", long_topic, 1)[0] < 0  # nothing committed
    reliability.check(
        "Regex match maps to an unusable name",
        f"a {len(long_topic)}-character topic matched by regex, name landed-{{source}}",
        tmp_path,
        "landed-x",  # nothing may land anywhere; the real name is not a valid plateau topic
        {0: []},
        produced=produced,
        outcome="worker stopped at assignment naming topics.0.name; nothing read or committed",
    )
