"""Roll policies: each trigger seals, the max_age timer fires alone, idle partitions stay quiet."""

from __future__ import annotations

import time

import pyarrow as pa

from plateau_core import RollPolicy, Store, WriterPolicy
from tests.support import append_patiently, batch


def _segments(store: Store, topic: str = "t") -> list[tuple[int, int]]:
    return [(s.start_offset, s.end_offset) for s in store.manifest.segments(topic)]


def _wait_for(predicate: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_max_rows_rolls(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_rows=10, max_age_s=3600))
        for start in range(0, 40, 5):
            append_patiently(writer, "t", 0, batch(range(start, start + 5)))
        assert _wait_for(lambda: len(_segments(store)) == 4)
        assert _segments(store) == [(0, 10), (10, 20), (20, 30), (30, 40)]
    finally:
        writer.close()


def test_max_bytes_rolls(store: Store) -> None:
    one = batch(range(5), value_size=1000)
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_bytes=one.nbytes * 2, max_age_s=3600))
        for start in range(0, 20, 5):
            append_patiently(writer, "t", 0, batch(range(start, start + 5), value_size=1000))
        assert _wait_for(lambda: len(_segments(store)) == 2)
        assert _segments(store) == [(0, 10), (10, 20)]
        assert writer.stats().buffered_rows == 0
    finally:
        writer.close()


def test_max_age_fires_without_new_records(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False, tick_s=0.02))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=0.3))
        # Taken before the append: however long this thread is kept from running, the seal
        # cannot be seen sooner than max_age after it unless the timer fires early.
        started = time.monotonic()
        writer.append("t", 0, batch([0, 1, 2]))
        assert _wait_for(lambda: _segments(store) == [(0, 3)], timeout_s=30)
        assert time.monotonic() - started >= 0.29
    finally:
        writer.close()


def test_idle_partition_never_seals_an_empty_segment(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False, tick_s=0.01))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=0.05))
        time.sleep(0.3)
        writer.flush()
        assert _segments(store) == []
        assert store.manifest.watermark("t", 0) is None
    finally:
        writer.close()


def test_schema_change_rolls(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
        writer.append("t", 0, batch([0, 1]))
        extra = {"level": pa.array(["info", "warn"])}
        append_patiently(writer, "t", 0, batch([2, 3], extra=extra))
        writer.flush()
        segments = store.manifest.segments("t")
        assert [(s.start_offset, s.end_offset) for s in segments] == [(0, 2), (2, 4)]
        assert segments[0].schema_fingerprint != segments[1].schema_fingerprint
    finally:
        writer.close()
    table = store.read("t").to_table()
    assert table.column("level").to_pylist() == [None, None, "info", "warn"]


def test_flush_seals_what_is_buffered(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        for p in range(3):
            writer.acquire("t", p, roll=RollPolicy(max_age_s=3600))
            writer.append("t", p, batch([p * 10, p * 10 + 1]))
        writer.flush([("t", 1)])
        assert [(s.partition, s.start_offset) for s in store.manifest.segments("t")] == [(1, 10)]
        writer.flush()
        assert len(store.manifest.segments("t")) == 3
    finally:
        writer.close()
