"""A partition whose data does not compress is written uncompressed after a sample, probed
again later, and compressed again once its data compresses; its mixed segments read, verify
and consolidate as any others."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from plateau_core import RollPolicy, Store, Writer, WriterPolicy
from plateau_core.adaptive_compression import AdaptiveCompression
from plateau_core.consolidate import Consolidator
from plateau_core.policies import ConsolidatePolicy
from plateau_core.segment_file import write_segment
from plateau_core.verify import verify_store
from tests.support import BASE_MS, append_patiently

# Arrow writes every lz4-compressed buffer as an LZ4 frame; its magic number is in the file
# once per buffer, and (4 fixed bytes) practically never in the few MiB of an uncompressed
# test segment.
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
ROWS = 1200  # of 1 KiB: one seal is a whole sample (plateau_core.adaptive_compression)
LETTERS = bytes(65 + i % 26 for i in range(256))


def letters_batch(start: int, rows: int = ROWS, seed: int = 0) -> pa.RecordBatch:
    """Random uppercase letters, as the Kafka perf test sends: lz4 saves about 1% of them."""
    data = random.Random(seed + start).randbytes(rows * 1024).translate(LETTERS)
    return _batch(start, [data[i * 1024 : (i + 1) * 1024] for i in range(rows)])


def log_batch(start: int, rows: int = ROWS) -> pa.RecordBatch:
    """Access-log-like JSON lines: lz4 saves most of them."""
    lines = [
        json.dumps(
            {
                "ts": BASE_MS + o,
                "lvl": "INFO",
                "svc": "checkout",
                "req": f"GET /api/v1/orders/{o % 977}",
                "status": 200,
                "pad": "x" * 900,
            }
        ).encode()
        for o in range(start, start + rows)
    ]
    return _batch(start, lines)


def _batch(start: int, values: list[bytes]) -> pa.RecordBatch:
    offsets = range(start, start + len(values))
    return pa.RecordBatch.from_pydict(
        {
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([BASE_MS + o for o in offsets], pa.timestamp("ms", tz="UTC")),
            "value": pa.array(values, pa.binary()),
        }
    )


def compressed(path: Path) -> bool:
    return LZ4_FRAME_MAGIC in path.read_bytes()


def segment_files(store: Store, topic: str) -> list[Path]:
    return [store.segment_path(s) for s in store.manifest.segments(topic)]


def seal_each(writer: Writer, topic: str, batches: list[pa.RecordBatch]) -> None:
    for one in batches:
        append_patiently(writer, topic, 0, one)
        writer.flush()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store.open(tmp_path / "data")
    yield opened
    opened.close()


def rows(store: Store, topic: str) -> dict[str, list[object]]:
    table = store.read(topic).to_table().sort_by("offset")
    return table.select(["offset", "timestamp", "value"]).to_pydict()


def appended(batches: list[pa.RecordBatch]) -> dict[str, list[object]]:
    return pa.Table.from_batches(batches).to_pydict()


def test_incompressible_data_is_written_uncompressed_after_its_first_sample(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    batches = [letters_batch(i * ROWS) for i in range(4)]
    try:
        writer.acquire("r", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600))
        with capture_logs() as logs:
            seal_each(writer, "r", batches)
        assert writer.codecs.modes() == {("r", 0): False}
    finally:
        writer.close()
    assert [compressed(p) for p in segment_files(store, "r")] == [True, False, False, False]
    [paused] = [e for e in logs if e["event"] == "compression_paused"]
    assert (paused["topic"], paused["partition"]) == ("r", 0)
    assert (paused["start_offset"], paused["end_offset"]) == (0, ROWS)
    assert paused["ratio"] > 0.95
    # The mixed partition reads and verifies as any other.
    assert rows(store, "r") == appended(batches)
    report = verify_store(store, deep=True)
    assert report.problem_count == 0, report


def test_compressible_data_stays_compressed(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600))
        seal_each(writer, "logs", [log_batch(i * ROWS) for i in range(4)])
        assert writer.codecs.modes() == {("logs", 0): True}
    finally:
        writer.close()
    assert [compressed(p) for p in segment_files(store, "logs")] == [True] * 4


def test_turned_off_every_segment_is_compressed(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False, compression_adaptive=False))
    try:
        writer.acquire("r", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600))
        seal_each(writer, "r", [letters_batch(i * ROWS) for i in range(3)])
    finally:
        writer.close()
    assert [compressed(p) for p in segment_files(store, "r")] == [True] * 3


def test_a_probe_compresses_again_once_the_data_compresses(store: Store) -> None:
    now = [0.0]
    writer = store.writer(WriterPolicy(fsync=False))
    writer.codecs = AdaptiveCompression("lz4", probe_s=60.0, clock=lambda: now[0])
    try:
        writer.acquire("r", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600))
        seal_each(writer, "r", [letters_batch(0), letters_batch(ROWS)])  # paused
        now[0] = 61.0
        seal_each(writer, "r", [letters_batch(2 * ROWS)])  # a probe finding nothing
        seal_each(writer, "r", [log_batch(3 * ROWS)])  # not probed yet: 60 s from the last
        now[0] = 122.0
        with capture_logs() as logs:
            seal_each(writer, "r", [log_batch(4 * ROWS), log_batch(5 * ROWS)])
        assert writer.codecs.modes() == {("r", 0): True}
        assert writer.codecs.switches() == {("r", 0): 2}
    finally:
        writer.close()
    files = segment_files(store, "r")
    assert [compressed(p) for p in files] == [True, False, True, False, True, True]
    [resumed] = [e for e in logs if e["event"] == "compression_resumed"]
    assert (resumed["start_offset"], resumed["end_offset"], resumed["probe"]) == (
        4 * ROWS,
        5 * ROWS,
        True,
    )


def test_small_writes_decide_on_a_whole_sample(tmp_path: Path) -> None:
    """Tiny seals (acks=all group commits) add up to a sample before anything switches."""
    codecs = AdaptiveCompression("lz4")
    chosen = []
    for i in range(150):  # 10 KiB each: about 100 make a sample
        codec = codecs.choose("r", 0)
        chosen.append(codec.codec)
        table = pa.Table.from_batches([letters_batch(i * 10, rows=10)])
        write_segment(tmp_path / "r", table, codec, fsync=False)
    switch = chosen.index("none")
    assert 90 < switch < 110
    assert set(chosen[:switch]) == {"lz4"} and set(chosen[switch:]) == {"none"}


def test_probes_after_a_volume_written_uncompressed(tmp_path: Path) -> None:
    codecs = AdaptiveCompression("lz4", probe_bytes=3 * ROWS * 1024, probe_s=3600.0)
    chosen = []
    for i in range(8):
        codec = codecs.choose("r", 0)
        chosen.append(codec.codec)
        table = pa.Table.from_batches([letters_batch(i * ROWS)])
        write_segment(tmp_path / "r", table, codec, fsync=False)
    # Each probe is one sample; then three segments' worth uncompressed again.
    assert chosen == ["lz4", "none", "none", "none", "lz4", "none", "none", "none"]


def test_consolidation_follows_the_partition_and_keeps_its_rows(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    batches = [letters_batch(i * ROWS) for i in range(3)]
    try:
        writer.acquire("r", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600))
        seal_each(writer, "r", batches)
        before = rows(store, "r")
        merged = Consolidator(
            store,
            {"r": ConsolidatePolicy(min_age_s=0)},
            compression=writer.codecs,
            fsync=False,
            guard=writer.maintaining,
        ).run()
    finally:
        writer.close()
    assert len(merged.merged) == 1
    [path] = segment_files(store, "r")
    assert not compressed(path)
    assert rows(store, "r") == before
    assert before == appended(batches)
