"""Checksums and verification: damaged, missing and unknown files are found by `verify`, by
recovery and serve's start-up check, and on read; none is ever served."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import text
from structlog.testing import capture_logs

import plateau_core.crc as crcs
import plateau_core.verify as verify_module
from plateau_core import (
    ManifestUnusableError,
    Retention,
    SegmentCorruptError,
    SegmentState,
    SegmentUnavailableError,
    Store,
    StoreLimits,
    WriterPolicy,
)
from plateau_core.manifest import Manifest, SegmentRecord, sqlite_url
from plateau_core.manifest.migrations import LATEST
from plateau_core.segment_file import write_segment
from plateau_core.verify import check_segment, verify_at_start, verify_store
from tests.support import batch

ROWS = 5000  # per batch: big enough that the file keeps each appended batch as its own


def _seal(store: Store, starts: list[int], *, batches: int = 3, topic: str = "t") -> None:
    """One segment per start offset, each of `batches` record batches of ROWS rows."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire(topic, 0)
        for start in starts:
            for b in range(batches):
                first = start + b * ROWS
                writer.append(topic, 0, batch(range(first, first + ROWS)))
            writer.flush()
    finally:
        writer.close()


def _store_with_segments(store: Store) -> list[SegmentRecord]:
    span = 3 * ROWS
    _seal(store, [0, span, 2 * span, 3 * span])
    return store.manifest.segments("t")


def _offsets(store: Store) -> list[int]:
    table = store.read("t", columns=["offset"]).to_table()
    return [int(o) for o in table.column("offset").to_pylist()]


def _flip(path: Path, position: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[position] ^= 0xFF
    path.write_bytes(bytes(raw))


def _in_batch(row: SegmentRecord, index: int = -1) -> int:
    assert row.checksums is not None
    position, length, _ = row.checksums.batches[index]
    return position + length // 2


def _in_schema(row: SegmentRecord) -> int:
    assert row.checksums is not None
    return row.checksums.head_end - 24


def _in_footer(row: SegmentRecord) -> int:
    assert row.checksums is not None
    return (row.checksums.tail_start + row.size_bytes) // 2


Damage = Callable[[Path, SegmentRecord], None]


def _truncate(path: Path, row: SegmentRecord) -> None:
    path.write_bytes(path.read_bytes()[: row.size_bytes // 2])


DAMAGE: dict[str, tuple[Damage, str]] = {
    "batch": (lambda p, r: _flip(p, _in_batch(r)), "checksum mismatch in record batch 2"),
    "schema": (lambda p, r: _flip(p, _in_schema(r)), "file header and schema"),
    "footer": (lambda p, r: _flip(p, _in_footer(r)), "in the footer"),
    "truncated": (_truncate, "size is"),
    "deleted": (lambda p, r: p.unlink(), "file is missing"),
}


def test_checksums_are_recorded_and_tile_the_file(store: Store) -> None:
    for row in _store_with_segments(store):
        assert row.checksums is not None
        assert len(row.checksums.batches) == 3
        assert row.checksums.tiling_problem(row.size_bytes) is None
        # What the writer recorded is what the file says.
        assert crcs.of_file(store.segment_path(row)) == row.checksums
        assert check_segment(store.segment_path(row), row, deep=True) is None


@pytest.mark.parametrize("compression", ["lz4", "zstd", "none"])
def test_write_time_checksums_match_the_file(tmp_path: Path, compression: str) -> None:
    small = pa.Table.from_batches([batch(range(i * 10, i * 10 + 10)) for i in range(500)])
    large = pa.Table.from_batches([batch(range(i * ROWS, (i + 1) * ROWS)) for i in range(4)])
    for name, table in (("small", small), ("large", large)):
        path, stats = write_segment(tmp_path / name, table, compression)  # type: ignore[arg-type]
        assert stats.checksums == crcs.of_file(path)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_verify_finds_each_damage_and_quarantines_it(store: Store, damage: str) -> None:
    rows = _store_with_segments(store)
    victim = rows[1]
    harm, expected = DAMAGE[damage]
    harm(store.segment_path(victim), victim)

    report = verify_store(store)
    assert [p.path for p in report.problems] == [victim.path]
    assert expected in report.problems[0].problem
    assert not report.clean
    assert store.manifest.segment_state(victim.id) is SegmentState.SEALED  # only reported

    with capture_logs() as logs:
        report = verify_store(store, quarantine=True)
    assert report.problems[0].quarantined
    assert store.manifest.segment_state(victim.id) is SegmentState.QUARANTINED
    [event] = [e for e in logs if e["event"] == "segment_quarantined"]
    assert event["log_level"] == "error"
    assert (event["topic"], event["partition"], event["path"]) == ("t", 0, victim.path)
    assert (event["start_offset"], event["end_offset"]) == (victim.start_offset, victim.end_offset)
    assert expected in event["problem"]

    # Listed as quarantined from now on; every other segment is served exactly.
    again = verify_store(store)
    assert [q.path for q in again.quarantined] == [victim.path]
    assert again.problems == []
    kept = [o for r in rows if r.id != victim.id for o in range(r.start_offset, r.end_offset)]
    assert _offsets(store) == kept


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_serve_start_check_quarantines_each_damage(store: Store, damage: str) -> None:
    rows = _store_with_segments(store)
    victim = rows[2]
    harm, expected = DAMAGE[damage]
    harm(store.segment_path(victim), victim)
    with capture_logs() as logs:
        report = verify_at_start(store, full=True)
    assert report is not None
    assert [p.problem for p in report.problems if expected in p.problem]
    assert store.manifest.segment_state(victim.id) is SegmentState.QUARANTINED
    [summary] = [e for e in logs if e["event"] == "store_verified"]
    assert summary["segments"] == 4
    assert summary["problems"] == 1
    assert summary["bytes"] == sum(r.size_bytes for r in rows)
    assert verify_at_start(store, full=False) is None


@pytest.mark.parametrize("damage", ["schema", "footer", "truncated", "deleted"])
def test_recovery_on_acquire_checks_size_head_and_tail(store: Store, damage: str) -> None:
    rows = _store_with_segments(store)
    victim = rows[0]
    harm, expected = DAMAGE[damage]
    harm(store.segment_path(victim), victim)
    writer = store.writer(WriterPolicy())
    assert writer.acquire("t", 0) == rows[-1].end_offset  # the watermark stands
    writer.close()
    [bad] = store.manifest.segments("t", states=(SegmentState.QUARANTINED,))
    assert bad.id == victim.id
    assert bad.problem is not None
    assert expected in bad.problem


@pytest.mark.parametrize("damage", ["batch", "schema", "footer", "truncated"])
def test_reading_a_corrupt_segment_raises_and_quarantines_it(store: Store, damage: str) -> None:
    rows = _store_with_segments(store)
    victim = rows[1]
    harm, expected = DAMAGE[damage]
    harm(store.segment_path(victim), victim)
    result = store.read("t", partitions=[0], start_offset=victim.start_offset, end_offset=None)
    served: list[int] = []
    with capture_logs() as logs, pytest.raises(SegmentCorruptError) as caught:
        for part in result:
            served.extend(part.column("offset").to_pylist())
    # Nothing of the bad segment was handed out, not even its intact first batches.
    assert not [o for o in served if victim.start_offset <= o < victim.end_offset]
    message = str(caught.value)
    assert victim.path in message
    assert f"t[0] offsets [{victim.start_offset}, {victim.end_offset})" in message
    assert expected in message
    assert store.manifest.segment_state(victim.id) is SegmentState.QUARANTINED
    assert [e["path"] for e in logs if e["event"] == "segment_quarantined"] == [victim.path]
    # The next query plans without it.
    kept = [o for r in rows if r.id != victim.id for o in range(r.start_offset, r.end_offset)]
    assert _offsets(store) == kept


def test_a_deleted_file_on_read_is_reported_not_skipped(store: Store) -> None:
    rows = _store_with_segments(store)
    store.segment_path(rows[3]).unlink()
    with pytest.raises(SegmentUnavailableError, match=r"00000000000000045000\.arrow"):
        store.read("t").to_table()


def test_only_the_batches_read_are_checked(store: Store) -> None:
    rows = _store_with_segments(store)
    victim = rows[0]
    _flip(store.segment_path(victim), _in_batch(victim, 2))
    # The index skips the damaged batch for this range: the rows asked for are intact.
    result = store.read("t", start_offset=0, end_offset=ROWS)
    assert result.to_table().column("offset").to_pylist() == list(range(ROWS))
    assert result.batches_skipped == 2
    with pytest.raises(SegmentCorruptError, match="record batch 2"):
        store.read("t", start_offset=2 * ROWS, end_offset=2 * ROWS + 1).to_table()


def test_deep_check_compares_decoded_rows_with_the_manifest(store: Store) -> None:
    rows = _store_with_segments(store)
    with store.manifest.engine.begin() as conn:
        conn.execute(
            text("UPDATE segments SET time_max = time_max + 1 WHERE id = :i"), {"i": rows[0].id}
        )
    assert verify_store(store).clean
    report = verify_store(store, deep=True)
    assert [p.path for p in report.problems] == [rows[0].path]
    assert "times span" in report.problems[0].problem


def test_orphans_and_temp_files_are_reported_not_removed(store: Store) -> None:
    rows = _store_with_segments(store)
    folder = store.data_dir / "topics/t/0"
    end = rows[-1].end_offset
    orphan, _ = write_segment(folder, pa.Table.from_batches([batch(range(end, end + 3))]))
    temp = folder / f".{orphan.name}.tmp-0123456789ab"
    temp.write_bytes(b"half a segment")
    report = verify_store(store, quarantine=True)
    assert report.orphans == [f"topics/t/0/{orphan.name}"]
    assert report.temp_files == [f"topics/t/0/{temp.name}"]
    assert report.problems == []
    assert not report.clean
    assert orphan.exists()
    assert temp.exists()
    writer = store.writer(WriterPolicy())
    writer.acquire("t", 0)  # recovery removes both
    writer.close()
    assert not orphan.exists()
    assert not temp.exists()
    assert verify_store(store).clean


def test_a_file_retention_removes_while_verify_looks_is_no_orphan(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _store_with_segments(store)
    store.manifest.mark_deleting([rows[0].id], at=0)
    listed = store.manifest.segments
    retention = Retention(store, limits=StoreLimits(deletion_grace_s=0))

    def retention_in_between(*args: object, **kwargs: object) -> list[SegmentRecord]:
        # Verify has listed the files; retention ends the grace: file, then row.
        monkeypatch.setattr(store.manifest, "segments", listed)
        retention.run()
        return listed(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store.manifest, "segments", retention_in_between)
    report = verify_store(store)
    assert not store.segment_path(rows[0]).exists()
    assert report.orphans == []
    assert report.clean


def test_a_segment_committed_while_verify_looks_is_no_orphan(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _store_with_segments(store)
    end = rows[-1].end_offset
    table = pa.Table.from_batches([batch(range(end, end + 3))])
    # A seal whose file is in place and whose transaction lands after verify listed the rows.
    path, stats = write_segment(store.data_dir / "topics/t/0", table)
    listed = store.manifest.segments

    def commit_after_listing(*args: object, **kwargs: object) -> list[SegmentRecord]:
        monkeypatch.setattr(store.manifest, "segments", listed)
        found = listed(*args, **kwargs)  # type: ignore[arg-type]
        store.manifest.commit_segment("t", 0, stats, f"topics/t/0/{path.name}", table.schema)
        return found

    monkeypatch.setattr(store.manifest, "segments", commit_after_listing)
    report = verify_store(store)
    assert report.orphans == []
    assert report.clean


def test_a_segment_sealed_after_verify_listed_the_rows_is_not_quarantined(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While verify checks the first segment, retention removes the newest (its grace over)
    and another topic seals one: the newest's missing file must not quarantine that one."""
    rows = _store_with_segments(store)
    newest = rows[-1]
    checking = verify_module.check_segment

    def retention_then_a_seal(path: Path, row: SegmentRecord, *args: object) -> str | None:
        if row.id == rows[0].id:
            store.manifest.mark_deleting([newest.id], at=0)
            Retention(store, limits=StoreLimits(deletion_grace_s=0)).run()
            _seal(store, [0], batches=1, topic="other")
        return checking(path, row, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(verify_module, "check_segment", retention_then_a_seal)
    report = verify_store(store, quarantine=True)
    assert report.problems == []
    [other] = store.manifest.segments("other")
    assert other.state == SegmentState.SEALED
    assert store.read("other").to_table().num_rows == ROWS


def test_rows_without_checksums_get_the_older_checks(store: Store) -> None:
    rows = _store_with_segments(store)
    with store.manifest.engine.begin() as conn:
        conn.execute(text("UPDATE segments SET checksums = NULL"))
    old = store.manifest.segments("t")
    assert all(r.checksums is None for r in old)
    assert verify_store(store).clean
    assert _offsets(store) == list(range(rows[-1].end_offset))
    store.segment_path(old[0]).write_bytes(store.segment_path(old[0]).read_bytes()[:100])
    assert "size is" in (check_segment(store.segment_path(old[0]), old[0]) or "")


def test_migration_adds_the_column_to_an_older_manifest(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Store.open(data) as store:
        _seal(store, [0], batches=1)
        with store.manifest.engine.begin() as conn:
            # Back to a manifest of schema version 2: later migrations undone.
            conn.execute(text("ALTER TABLE segments DROP COLUMN checksums"))
            for table in ("produced_topics", "producers", "counters"):
                conn.execute(text(f"DROP TABLE {table}"))
            conn.execute(text("DELETE FROM schema_version WHERE version >= 3"))
    with Store.open(data) as store:
        assert store.manifest.schema_version == LATEST
        [row] = store.manifest.segments("t")
        assert row.checksums is None  # recorded before v3: no checksums, still served
        assert _offsets(store) == list(range(ROWS))
        assert verify_store(store).clean


def test_integrity_check_of_a_sound_manifest(store: Store) -> None:
    _store_with_segments(store)
    assert store.manifest.integrity_check() == []


def _overwrite_header(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[:32] = b"\xa5" * 32
    path.write_bytes(bytes(raw))


def _drop_manifest(data: Path) -> None:
    for name in ("manifest.db", "manifest.db-wal", "manifest.db-shm"):
        (data / name).unlink(missing_ok=True)


@pytest.mark.parametrize("loss", ["corrupted", "deleted"])
def test_a_lost_manifest_is_refused_and_no_segment_is_deleted(tmp_path: Path, loss: str) -> None:
    data = tmp_path / "data"
    with Store.open(data) as store:
        _store_with_segments(store)
    files = sorted((data / "topics/t/0").glob("*.arrow"))
    assert len(files) == 4
    if loss == "corrupted":
        _overwrite_header(data / "manifest.db")
    else:
        _drop_manifest(data)
    for _ in range(2):  # a refused open leaves nothing a second open would take as a manifest
        with pytest.raises(ManifestUnusableError) as caught:
            Store.open(data)
        assert str(data) in str(caught.value)
        assert "plateau rebuild-manifest" in str(caught.value)
    assert sorted((data / "topics/t/0").glob("*.arrow")) == files


def test_without_the_guard_recovery_would_delete_every_segment(tmp_path: Path) -> None:
    """Why Store.open refuses: the same files under a new, empty manifest are orphans."""
    data = tmp_path / "data"
    with Store.open(data) as store:
        _store_with_segments(store)
    _drop_manifest(data)
    with pytest.raises(ManifestUnusableError):
        Store.open(data)
    assert len(list((data / "topics/t/0").glob("*.arrow"))) == 4
    unguarded = Store(data, Manifest(sqlite_url(data / "manifest.db")))
    try:
        writer = unguarded.writer(WriterPolicy())
        writer.acquire("t", 0)
        writer.close()
    finally:
        unguarded.close()
    assert list((data / "topics/t/0").glob("*.arrow")) == []


def test_a_new_store_opens_normally(tmp_path: Path) -> None:
    with Store.open(tmp_path / "fresh") as store:
        assert store.manifest.version_at_open == 0
    with Store.open(tmp_path / "fresh") as store:
        assert store.manifest.version_at_open == LATEST
