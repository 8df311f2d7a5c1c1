"""Rebuilding a lost or corrupted manifest from the segment files."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import text

from plateau_core import SegmentState, Store, WriterPolicy
from plateau_core.consolidate import Consolidator
from plateau_core.errors import ManifestUnusableError
from plateau_core.names import STORE_ID_FILE
from plateau_core.policies import ConsolidatePolicy
from plateau_core.rebuild import RebuildRefusedError, RebuildReport, rebuild_manifest
from plateau_core.rebuild_partition import PartitionRebuild
from plateau_core.rollup import RollupPolicy, reaggregate, rollup_metrics
from plateau_core.segment_file import write_segment
from plateau_core.verify import verify_store
from tests.support import batch

SEGMENT_FIELDS = (
    "topic",
    "partition",
    "start_offset",
    "end_offset",
    "record_count",
    "time_min",
    "time_max",
    "size_bytes",
    "path",
    "schema_fingerprint",
    "state",
    "checksums_json",
)


def _fill(data: Path) -> None:
    """Two topics, three partitions, a schema change, and a store that was replicated."""
    with Store.open(data) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            for topic, partition in (("a", 0), ("a", 1), ("b", 0)):
                writer.acquire(topic, partition)
                for start in range(0, 40, 10):
                    writer.append(topic, partition, batch(range(start, start + 10)))
                    writer.flush()
            extra = {"note": pa.array(["x"] * 5)}
            writer.append("b", 0, batch(range(40, 45), extra=extra))
            writer.flush()
        finally:
            writer.close()
        first = store.manifest.segments("a", partitions=[0])[0]
        store.manifest.mark_replicated([first.id])


def _snapshot(store: Store) -> tuple[list[tuple[Any, ...]], dict[tuple[str, int], int]]:
    rows = [
        tuple(getattr(r, f) for f in SEGMENT_FIELDS)
        for r in store.manifest.segments(states=tuple(SegmentState))
    ]
    marks = {(s.topic, s.partition): s.next_offset for s in store.spans()}
    return rows, marks


def _drop_manifest(data: Path) -> None:
    for name in ("manifest.db", "manifest.db-wal", "manifest.db-shm"):
        (data / name).unlink(missing_ok=True)


def _as_sealed(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    state = SEGMENT_FIELDS.index("state")
    return [(*r[:state], SegmentState.SEALED, *r[state + 1 :]) for r in rows]


@pytest.mark.parametrize("loss", ["deleted", "corrupted"])
def test_rebuild_reproduces_segments_offsets_and_watermarks(tmp_path: Path, loss: str) -> None:
    data = tmp_path / "data"
    _fill(data)
    with Store.open(data) as store:
        rows, marks = _snapshot(store)
        schemas = {t: store.manifest.schemas(t) for t in ("a", "b")}
        tables = {t: store.read(t).to_table() for t in ("a", "b")}
    if loss == "deleted":
        _drop_manifest(data)
    else:
        raw = bytearray((data / "manifest.db").read_bytes())
        raw[:64] = b"\0" * 64
        (data / "manifest.db").write_bytes(bytes(raw))

    report = rebuild_manifest(data)

    assert report.segments == len(rows)
    assert report.quarantined == report.set_aside == []
    if loss == "corrupted":
        assert any(".broken-" in path for path in report.moved_aside)
    with Store.open(data) as store:
        again, again_marks = _snapshot(store)
        # Replication state is not in the files: the replicated segment comes back sealed.
        assert again == _as_sealed(rows)
        assert again_marks == marks
        assert {t: store.manifest.schemas(t) for t in ("a", "b")} == schemas
        for topic, table in tables.items():
            assert store.read(topic).to_table().equals(table)
        assert verify_store(store).clean
        # Ingestion resumes at the watermark as before.
        writer = store.writer(WriterPolicy(fsync=False))
        assert writer.acquire("a", 0) == 40
        writer.append("a", 0, batch(range(40, 50)))
        writer.close()
        assert store.read("a", partitions=[0]).to_table().column("offset").to_pylist() == list(
            range(50)
        )
    assert any("replicat" in note for note in report.notes)


def test_rebuild_is_refused_while_a_partition_is_locked(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _fill(data)
    with Store.open(data) as store:
        writer = store.writer(WriterPolicy())
        writer.acquire("b", 0)
        try:
            with pytest.raises(RebuildRefusedError, match="serve appears to be running"):
                rebuild_manifest(data)
        finally:
            writer.close()
        # Nothing was touched: the manifest is still the one in use.
        assert (data / "manifest.db").exists()
        assert not list(data.glob("*.broken-*"))
        assert len(store.manifest.segments()) == 13


def test_unreadable_and_overlapping_files_are_kept_and_never_served(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _fill(data)
    folder = data / "topics/a/0"
    names = sorted(p.name for p in folder.glob("*.arrow"))  # starts 0, 10, 20, 30
    (folder / names[1]).write_bytes(b"not a segment at all")
    last = folder / names[3]
    last.write_bytes(last.read_bytes()[:200])
    # In another partition, a leftover that overlaps the segment before it, [20, 30).
    write_segment(data / "topics/a/1", pa.Table.from_batches([batch(range(25, 35))]))
    (folder / ".00000000000000000040.arrow.tmp-abcdefabcdef").write_bytes(b"half")
    _drop_manifest(data)

    report = rebuild_manifest(data)

    quarantined = {q.path: q for q in report.quarantined}
    overlapping = "topics/a/1/00000000000000000025.arrow"
    assert set(quarantined) == {f"topics/a/0/{names[1]}", overlapping}
    assert "unreadable" in quarantined[f"topics/a/0/{names[1]}"].problem
    assert "overlap" in quarantined[overlapping].problem
    [aside] = report.set_aside
    assert aside.start_offset == 30
    assert (data / aside.path).exists()
    assert not last.exists()
    assert report.temp_removed == ["topics/a/0/.00000000000000000040.arrow.tmp-abcdefabcdef"]
    with Store.open(data) as store:
        # The watermark is the end of the last readable segment: 30 on is read from Kafka again.
        assert store.manifest.watermark("a", 0) == 30
        served = store.read("a", partitions=[0]).to_table().column("offset").to_pylist()
        assert served == list(range(10)) + list(range(20, 30))
        writer = store.writer(WriterPolicy(fsync=False))
        assert writer.acquire("a", 0) == 30
        writer.append("a", 0, batch(range(30, 40)))  # the replay: no clash with what was kept
        writer.flush()
        writer.acquire("a", 1)
        writer.close()
        assert (folder / names[1]).exists()  # quarantined files are not orphans
        assert (data / overlapping).exists()
        assert store.manifest.watermark("a", 1) == 40
        served = store.read("a", partitions=[1]).to_table().column("offset").to_pylist()
        assert served == list(range(40))
        served = store.read("a", partitions=[0]).to_table().column("offset").to_pylist()
        assert served == list(range(10)) + list(range(20, 40))
        report_after = verify_store(store)
        assert sorted(q.path for q in report_after.quarantined) == sorted(quarantined)
        assert report_after.set_aside == [aside.path]
        assert report_after.problems == []


def test_watermark_moves_back_to_the_last_segment(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _fill(data)
    with Store.open(data) as store:
        store.manifest.advance_watermark("a", 1, 55)  # skipped records after the last segment
        store.manifest.record_gap("a", 1, 60, 70)
    _drop_manifest(data)
    rebuild_manifest(data)
    with Store.open(data) as store:
        assert store.manifest.watermark("a", 1) == 40
        assert store.manifest.gaps("a") == []


def test_rebuild_of_an_empty_data_dir(tmp_path: Path) -> None:
    with pytest.raises(RebuildRefusedError, match="no data folder"):
        rebuild_manifest(tmp_path / "empty")
    (tmp_path / "empty").mkdir()
    report = rebuild_manifest(tmp_path / "empty")
    assert report.segments == 0
    with Store.open(tmp_path / "empty") as store:
        assert store.spans() == []


def test_rebuild_moves_the_old_manifest_aside(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _fill(data)
    report = rebuild_manifest(data)
    moved = [Path(p) for p in report.moved_aside]
    assert moved and all(p.exists() for p in moved)
    assert moved[0].name.startswith("manifest.db.broken-")
    with Store.open(data) as store, store.manifest.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM segments")).scalar() == 13


def test_producer_ids_after_a_rebuild_are_above_any_handed_out_before(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _fill(data)
    with Store.open(data) as store:
        before = [store.manifest.next_producer_id() for _ in range(3)]
    report = rebuild_manifest(data)
    assert any("producer" in note for note in report.notes)
    with Store.open(data) as store:
        after = store.manifest.next_producer_id()
    assert after > max(before)
    time.sleep(1.1)  # the old manifest is moved aside under a name with the second
    rebuild_manifest(data)  # and again: above what the first rebuild handed out
    with Store.open(data) as store:
        assert store.manifest.next_producer_id() > after


def test_an_interrupted_rebuild_leaves_a_store_that_is_refused_until_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened on a half-built manifest, recovery would delete the files the rebuild had not
    recorded yet as orphans."""
    data = tmp_path / "data"
    _fill(data)
    with Store.open(data) as store:
        before = _snapshot(store)
    run = PartitionRebuild.run
    done: list[str] = []

    def interrupted(self: PartitionRebuild, folder: Path) -> None:
        if done:
            raise KeyboardInterrupt
        done.append(self.topic)
        run(self, folder)

    monkeypatch.setattr(PartitionRebuild, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rebuild_manifest(data)
    with pytest.raises(ManifestUnusableError, match="rebuild-manifest was interrupted"):
        Store.open(data)
    monkeypatch.setattr(PartitionRebuild, "run", run)
    time.sleep(1.1)  # the manifest is moved aside under a name with the second
    rebuild_manifest(data)
    with Store.open(data) as store:
        rows, marks = _snapshot(store)
    assert (rows, marks) == (_as_sealed(before[0]), before[1])


def test_the_report_names_the_manifest_without_its_password(tmp_path: Path) -> None:
    report = RebuildReport(
        data_dir=str(tmp_path), manifest_url="postgresql://plateau:hunter2-pw@db:5432/plateau"
    )
    shown = "\n".join(report.lines())
    assert "postgresql://plateau:***@db:5432/plateau" in shown
    assert "hunter2-pw" not in shown


def test_a_rebuild_keeps_the_store_id(
    store: Store, empty_manifest: Callable[[Store], str | None]
) -> None:
    """Streams' checkpoints name the store: a rebuilt manifest is the same store, so it keeps
    the id (from the store-id file), though the watermarks may have moved back."""
    writer = store.writer(WriterPolicy(fsync=False))
    writer.acquire("t", 0)
    writer.append("t", 0, batch(range(10)))
    writer.close()
    kept = store.manifest.store_id()
    data = store.data_dir
    store.close()
    url = empty_manifest(store)
    report = rebuild_manifest(data, url)
    assert report.store_id == kept and f"store {kept}" in report.lines()[0]
    with Store.open(data, manifest_url=url) as rebuilt:
        assert rebuilt.manifest.store_id() == kept
        assert rebuilt.read("t").to_table().num_rows == 10


def test_a_rebuild_of_a_folder_from_before_store_ids_gives_it_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _fill(data)
    (data / STORE_ID_FILE).unlink()
    report = rebuild_manifest(data)
    assert (data / STORE_ID_FILE).read_text().strip() == report.store_id
    with Store.open(data) as store:
        assert store.manifest.store_id() == report.store_id


def test_a_roll_up_of_raw_records_read_again_is_set_aside_not_recorded(tmp_path: Path) -> None:
    """The last raw segment unreadable: its records are read from Kafka again, sealed again
    and rolled up again. Its roll-up segment, readable, was recorded too: the new seal's
    roll-up, at the same offset, was taken for it and written over its file (the roll-up
    read as corrupt and was quarantined, its rows lost)."""
    data = tmp_path / "data"
    counts = RollupPolicy("1m", 60_000, (), rollup_metrics(["count"]))
    with Store.open(data) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("a", 0, rollups=(counts,))
            for start in range(0, 30, 10):
                writer.append("a", 0, batch(range(start, start + 10)))
                writer.flush()
        finally:
            writer.close()
    last = data / "topics/a/0" / f"{20:020d}.arrow"
    last.write_bytes(last.read_bytes()[:200])
    _drop_manifest(data)

    report = rebuild_manifest(data)

    assert sorted((s.topic, s.start_offset) for s in report.set_aside) == [
        ("a", 20),
        ("a.rollup.1m", 20),
    ]
    with Store.open(data) as store:
        assert store.manifest.watermark("a.rollup.1m", 0) == 11
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            assert writer.acquire("a", 0, rollups=(counts,)) == 20
            # The replay from Kafka, sealed in other cuts than before.
            for start in (20, 25):
                writer.append("a", 0, batch(range(start, start + 5)))
                writer.flush(timeout_s=5)
        finally:
            writer.close(timeout_s=5)
        rolled = reaggregate(store.read("a.rollup.1m").to_table(), counts)
        assert sum(rolled.column("count").to_pylist()) == 30
        assert store.manifest.segments("a.rollup.1m", states=(SegmentState.QUARANTINED,)) == []


def test_a_consolidated_roll_up_past_the_raw_watermark_keeps_only_the_rows_below_it(
    tmp_path: Path,
) -> None:
    """A consolidated roll-up file holding the roll-up of a raw segment that is set aside
    (read from Kafka again): recorded whole, the replayed seal's roll-up overlapped it, and
    every seal of the partition failed from then on."""
    data = tmp_path / "data"
    counts = RollupPolicy("1m", 60_000, (), rollup_metrics(["count"]))
    with Store.open(data) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("a", 0, rollups=(counts,))
            for start in range(0, 30, 10):
                writer.append("a", 0, batch(range(start, start + 10)))
                writer.flush()
        finally:
            writer.close()
        merging = ConsolidatePolicy(target_bytes=10**6, min_age_s=0)
        assert Consolidator(store, {"a.rollup.1m": merging}).run().segments_removed == 2
    last = data / "topics/a/0" / f"{20:020d}.arrow"
    last.write_bytes(last.read_bytes()[:200])
    _drop_manifest(data)

    report = rebuild_manifest(data)

    aside = {s.path.split(".unreadable-")[0] for s in report.set_aside}
    assert f"topics/a.rollup.1m/0/{0:020d}-{21:020d}.arrow" in aside
    with Store.open(data) as store:
        assert store.manifest.watermark("a.rollup.1m", 0) == 11
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            assert writer.acquire("a", 0, rollups=(counts,)) == 20
            writer.append("a", 0, batch(range(20, 30)))  # the replay from Kafka
            writer.flush(timeout_s=5)
        finally:
            writer.close(timeout_s=5)
        rolled = reaggregate(store.read("a.rollup.1m").to_table(), counts)
        assert sum(rolled.column("count").to_pylist()) == 30
