"""Bloom filters of indexed columns: in the segment footer, copied into the manifest with the
segment, restored by a rebuild, used by `where` reads to leave segments unopened."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import text

from plateau_core import InvalidInputError, RollPolicy, Store, WriterPolicy
from plateau_core.bloom import from_footer
from plateau_core.manifest import SegmentRecord, SegmentState
from plateau_core.manifest.bloom_cache import BloomCache
from plateau_core.manifest.migrations import LATEST
from plateau_core.policies import IndexPolicy
from plateau_core.rebuild import rebuild_manifest
from plateau_core.segment_file import open_segment
from tests.support import append_patiently

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000
ROWS = 50
SEGMENTS = 20
INDEX = IndexPolicy(bloom=("request_id", "key", "latency", "status"), fpp=0.01)


def request_id(i: int) -> str:
    """Ids in no order, so every segment's min/max spans nearly all of them: only the
    filters can rule a segment out."""
    return hashlib.sha256(str(i).encode()).hexdigest()[:16]


def _batch(start: int) -> pa.RecordBatch:
    n = range(start, start + ROWS)
    return pa.RecordBatch.from_pydict(
        {
            "offset": pa.array(n, pa.int64()),
            "timestamp": pa.array([BASE_MS + i for i in n], TS),
            "key": pa.array([f"user-{i % 7}".encode() for i in n], pa.binary()),
            "request_id": pa.array([request_id(i) for i in n], pa.string()),
            "status": pa.array([200 + (i % 3) for i in n], pa.int32()),
            "latency": pa.array([i * 0.1 for i in n], pa.float64()),
        }
    )


def _write(store: Store, index: IndexPolicy | None = INDEX) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600), index=index)
        for i in range(SEGMENTS):
            append_patiently(writer, "logs", 0, _batch(i * ROWS))
        writer.flush()
    finally:
        writer.close()


def test_filters_are_in_the_footer_and_the_manifest(store: Store) -> None:
    _write(store)
    segments = store.manifest.segments("logs")
    assert len(segments) == SEGMENTS
    blooms = store.manifest.blooms("logs", ["request_id", "key", "latency", "status"])
    assert set(blooms) == {s.id for s in segments}
    for segment in segments:
        # A float column has statistics but no filter.
        assert set(blooms[segment.id]) == {"request_id", "key", "status"}
        footer = from_footer(open_segment(store.segment_path(segment)).metadata)
        assert {b.column: b for b in footer} == blooms[segment.id]


def test_needle_opens_only_the_segment_holding_it(store: Store) -> None:
    _write(store)
    needle = request_id(7 * ROWS + 3)
    result = store.read("logs", where={"request_id": needle})
    assert result.to_table().column("offset").to_pylist() == [7 * ROWS + 3]
    assert result.opened == [f"topics/logs/0/{7 * ROWS:020d}.arrow"]
    assert result.pruned == SEGMENTS - 1
    several = store.read("logs", where={"request_id": [needle, request_id(2), "absent"]})
    assert several.to_table().column("offset").to_pylist() == [2, 7 * ROWS + 3]
    assert len(several.opened) == 2
    by_key = store.read("logs", where={"key": "user-3", "status": 201})
    expected = [i for i in range(SEGMENTS * ROWS) if i % 7 == 3 and i % 3 == 1]
    assert by_key.to_table().column("offset").to_pylist() == expected


def test_text_that_is_not_unicode_is_refused_by_name_not_by_the_filters(store: Store) -> None:
    """A lone surrogate (text decoded with surrogateescape) cannot be hashed as UTF-8: the
    read failed with UnicodeEncodeError while probing the filters."""
    _write(store)
    with pytest.raises(InvalidInputError, match=r"'request_id'.* is not valid Unicode"):
        store.read("logs", where={"request_id": [request_id(3), "r-\udcff"]}).to_table()


def test_without_an_index_no_segment_is_ruled_out_by_filters(store: Store) -> None:
    _write(store, index=None)
    assert store.manifest.blooms("logs", ["request_id"]) == {}
    result = store.read("logs", where={"request_id": request_id(3)})
    assert result.to_table().column("offset").to_pylist() == [3]
    assert result.pruned == 0


def test_rebuild_restores_the_filters_from_the_footers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Store.open(data) as store:
        _write(store)
        before = sorted(
            (s.start_offset, sorted(b.items()))
            for s in store.manifest.segments("logs")
            for b in [store.manifest.blooms("logs", ["request_id", "key"])[s.id]]
        )
        pruned = store.read("logs", where={"request_id": request_id(5)}).pruned
        assert pruned >= SEGMENTS - 3  # request_id(5) has false positives in two segments
    for name in ("manifest.db", "manifest.db-wal", "manifest.db-shm"):
        (data / name).unlink(missing_ok=True)
    rebuild_manifest(data)
    with Store.open(data) as store:
        after = sorted(
            (s.start_offset, sorted(b.items()))
            for s in store.manifest.segments("logs")
            for b in [store.manifest.blooms("logs", ["request_id", "key"])[s.id]]
        )
        assert after == before
        assert store.read("logs", where={"request_id": request_id(5)}).pruned == pruned


def test_removed_segments_take_their_filters_along(store: Store) -> None:
    _write(store)
    first = store.manifest.segments("logs")[0]
    store.manifest.mark_deleting([first.id])
    store.manifest.remove([first.id])
    with store.manifest.engine.connect() as conn:
        ids = set(conn.execute(text("SELECT segment_id FROM segment_blooms")).scalars())
    assert first.id not in ids
    assert len(ids) == SEGMENTS - 1


def test_segments_recorded_before_the_migration_are_read_unpruned(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Store.open(data) as store:
        _write(store)
        with store.manifest.engine.begin() as conn:
            conn.execute(text("DROP TABLE segment_blooms"))
            conn.execute(text("DELETE FROM schema_version WHERE version >= 6"))
    with Store.open(data) as store:
        assert store.manifest.schema_version == LATEST
        assert store.manifest.blooms("logs", ["request_id"]) == {}
        result = store.read("logs", where={"request_id": request_id(60)})
        assert result.to_table().column("offset").to_pylist() == [60]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fpp": 0.0}, "index.fpp"),
        ({"fpp": 1.0}, "index.fpp"),
        ({"bloom": ("offset",)}, "index.bloom: 'offset'"),
        ({"bloom": ("a", "a")}, "twice"),
    ],
)
def test_bad_index_policy_names_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        IndexPolicy(**kwargs)  # type: ignore[arg-type]


def test_filters_are_read_from_the_database_once_then_from_memory(store: Store) -> None:
    _write(store)
    cache = store.manifest.bloom_cache
    needle = request_id(7 * ROWS + 3)
    first = store.read("logs", where={"request_id": needle}).to_table()
    assert cache.misses == SEGMENTS and cache.hits == 0
    again = store.read("logs", where={"request_id": needle}).to_table()
    assert cache.misses == SEGMENTS  # nothing fetched the second time
    assert cache.hits == SEGMENTS
    assert again.equals(first) and first.column("offset").to_pylist() == [7 * ROWS + 3]


def test_the_cache_stays_within_its_bytes_and_answers_the_same(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    try:
        _write(store)
        one = len(
            next(iter(store.manifest.blooms("logs", ["request_id"]).values()))["request_id"].bits
        )
        store.manifest.bloom_cache = BloomCache(max_bytes=3 * (one + 200))
        for i in range(0, SEGMENTS * ROWS, 37):
            rows = store.read("logs", where={"request_id": request_id(i)}).to_table()
            assert rows.column("offset").to_pylist() == [i]
            assert store.manifest.bloom_cache.bytes <= 3 * (one + 200)
    finally:
        store.close()


def test_a_kept_segment_that_changed_meanwhile_makes_the_read_list_them_all_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between listing spans and reading the kept segments' records, retention or a
    consolidation may retire one: the read then plans from the full listing instead."""
    _write(store)
    real = store.manifest.segments_by_id
    calls: list[list[int]] = []

    def merged_away(ids: Sequence[int]) -> list[SegmentRecord]:
        calls.append(list(ids))
        return [replace(r, state=SegmentState.DELETING) for r in real(ids)]

    monkeypatch.setattr(store.manifest, "segments_by_id", merged_away)
    needle = request_id(11 * ROWS + 1)
    result = store.read("logs", where={"request_id": needle})
    rows = result.to_table()
    assert len(calls) == 1 and len(calls[0]) < SEGMENTS  # the pruned path was tried
    assert result.pruned == 0 and len(result.segments) == SEGMENTS  # then the full listing
    assert rows.column("offset").to_pylist() == [11 * ROWS + 1]
