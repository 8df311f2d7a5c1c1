"""Consolidation: small segments merged into larger ones by one manifest swap; reads, offsets
and replication state unchanged; readers in flight keep their files; a crash at any step
leaves the old set or the new one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from plateau_core import RollPolicy, Store, StoreLimits, WriterPolicy
from plateau_core.consolidate import ConsolidationReport, Consolidator, plan_runs
from plateau_core.errors import InvalidInputError
from plateau_core.manifest import SegmentState
from plateau_core.pace import Pace, Wait
from plateau_core.policies import ConsolidatePolicy, IndexPolicy
from plateau_core.rebuild import RebuildReport, rebuild_manifest
from plateau_core.recovery import recover_partition
from plateau_core.retention import Retention
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats
from tests.core.test_blooms import _batch, request_id
from tests.support import append_patiently

EmptyManifest = Callable[[Store], str | None]
ROWS = 50
SEGMENTS = 12
NOW_POLICY = ConsolidatePolicy(target_bytes=10**9, min_age_s=0)
INDEX = IndexPolicy(bloom=("request_id",))


@pytest.fixture
def small(store: Store) -> Store:
    """Topic `logs`, partition 0: twelve 50-row segments."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600), index=INDEX)
        for i in range(SEGMENTS):
            append_patiently(writer, "logs", 0, _batch(i * ROWS))
        writer.flush()
    finally:
        writer.close()
    return store


def _rows(store: Store) -> pa.Table:
    return store.read("logs").to_table()


def _consolidator(store: Store, policy: ConsolidatePolicy = NOW_POLICY, **kw: Any) -> Consolidator:
    return Consolidator(store, {"logs": policy}, indexes={"logs": INDEX}, fsync=False, **kw)


def _files(store: Store) -> list[str]:
    return sorted(p.name for p in (store.data_dir / "topics" / "logs" / "0").glob("*.arrow"))


def test_a_run_becomes_one_segment_with_the_same_rows_offsets_and_indexes(small: Store) -> None:
    before = _rows(small)
    watermark = small.manifest.watermark("logs", 0)
    report = _consolidator(small).run()
    assert [(m.start_offset, m.end_offset, m.segments) for m in report.merged] == [
        (0, SEGMENTS * ROWS, SEGMENTS)
    ]
    [merged] = small.manifest.segments("logs")
    assert merged.path == f"topics/logs/0/{0:020d}-{SEGMENTS * ROWS:020d}.arrow"
    assert merged.record_count == SEGMENTS * ROWS
    assert _rows(small).equals(before)
    assert small.manifest.watermark("logs", 0) == watermark
    assert small.spans("logs")[0].records == SEGMENTS * ROWS
    needle = small.read("logs", where={"request_id": request_id(333)})
    assert needle.to_table().column("offset").to_pylist() == [333]
    assert set(small.manifest.blooms("logs", ["request_id"])) == {merged.id}
    # The old files stay for the deletion grace, then retention removes them and their rows.
    assert len(_files(small)) == SEGMENTS + 1
    Retention(small, limits=StoreLimits(deletion_grace_s=0)).run()
    assert _files(small) == [merged.path.rsplit("/", 1)[1]]
    assert len(small.manifest.segments("logs", states=tuple(SegmentState))) == 1
    assert _consolidator(small).run().merged == []  # nothing left to merge


def test_runs_respect_the_target_age_state_and_schema(small: Store) -> None:
    rows = small.manifest.segments("logs")
    size = rows[0].size_bytes
    now = max(r.created_at for r in rows)
    runs = plan_runs(rows, ConsolidatePolicy(target_bytes=size * 5, min_age_s=0), now)
    assert [len(r) for r in runs] == [5, 5, 2]
    assert plan_runs(rows, ConsolidatePolicy(min_age_s=60), now) == []
    small.manifest.quarantine(rows[4].id, "test")
    small.manifest.mark_replicated([r.id for r in rows[7:]])
    mixed = small.manifest.segments("logs", states=tuple(SegmentState))
    runs = plan_runs(mixed, NOW_POLICY, now)
    assert [[s.start_offset // ROWS for s in r] for r in runs] == [
        [0, 1, 2, 3],
        [5, 6],
        [7, 8, 9, 10, 11],
    ]


def test_replication_state_is_kept(small: Store) -> None:
    rows = small.manifest.segments("logs")
    small.manifest.mark_replicated([r.id for r in rows[:6]])
    replicated_offset = small.spans("logs")[0].replicated_offset
    report = _consolidator(small).run()
    assert [m.segments for m in report.merged] == [6, 6]
    states = [(s.start_offset, s.state) for s in small.manifest.segments("logs")]
    assert states == [(0, SegmentState.REPLICATED), (6 * ROWS, SegmentState.SEALED)]
    assert small.spans("logs")[0].replicated_offset == replicated_offset


def test_a_read_planned_before_the_swap_reads_the_old_files(small: Store) -> None:
    before = _rows(small)
    planned = small.read("logs")
    _consolidator(small).run()
    Retention(small, limits=StoreLimits(deletion_grace_s=300)).run()
    assert planned.to_table().equals(before)
    assert len(planned.opened) == SEGMENTS


class CrashAfterWrite:
    """Writes the merged file, then fails: a crash after the rename, before the swap."""

    def __call__(self, directory: Path, table: pa.Table, *args: Any, **kw: Any) -> Any:
        write_segment(directory, table, *args, **kw)
        raise OSError("power lost")


def _crash_in_swap(store: Store, *, after_commit: bool) -> Callable[..., int]:
    original = store.manifest.swap_segments

    def swap(*args: Any) -> int:
        if after_commit:
            original(*args)
        raise OSError("connection lost")

    return swap


@pytest.mark.parametrize("step", ["write", "swap", "after_swap"])
def test_a_crash_at_each_step_leaves_the_old_or_the_new_set(
    small: Store, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _rows(small)
    old = _files(small)
    consolidator = _consolidator(
        small, write=CrashAfterWrite() if step == "write" else write_segment
    )
    if step != "write":
        swap = _crash_in_swap(small, after_commit=step == "after_swap")
        monkeypatch.setattr(small.manifest, "swap_segments", swap)
    if step == "after_swap":
        assert len(consolidator.run().merged) == 1  # the swap landed: the outcome is known
    else:
        with pytest.raises(OSError):
            consolidator.run()
    monkeypatch.undo()
    # What a restart does: recovery of the folder against the manifest.
    recover_partition(small, "logs", 0)
    assert _rows(small).equals(before)
    readable = small.manifest.segments("logs")
    if step == "after_swap":
        assert len(readable) == 1
        assert len(_files(small)) == SEGMENTS + 1  # old files kept for the grace
    else:
        assert len(readable) == SEGMENTS
        assert _files(small) == old  # the unrecorded merged file is gone
        assert len(_consolidator(small).run().merged) == 1  # and the next run succeeds
        assert _rows(small).equals(before)


def test_a_run_changed_meanwhile_is_left_as_it_was(
    small: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _rows(small)
    original = small.manifest.swap_segments

    def retention_first(run: Any, merged: Any) -> int:
        small.manifest.mark_deleting([run[3].id])
        return original(run, merged)

    monkeypatch.setattr(small.manifest, "swap_segments", retention_first)
    report = _consolidator(small).run()
    assert report.merged == [] and report.conflicts == 1
    assert len(small.manifest.segments("logs")) == SEGMENTS - 1
    assert len(_files(small)) == SEGMENTS
    assert _rows(small).num_rows == before.num_rows - ROWS


def test_a_run_whose_newest_segment_is_removed_meanwhile_leaves_the_next_one_alone(
    small: Store,
) -> None:
    """The run's newest segment retired and removed (its grace over) while the merged file is
    written, then a segment of another partition sealed: the swap must see the run changed,
    not retire the new segment in its place."""
    newest = small.manifest.segments("logs")[-1]

    def retention_then_a_seal(directory: Path, table: pa.Table, *args: Any, **kw: Any) -> Any:
        small.manifest.mark_deleting([newest.id], at=0)
        Retention(small, limits=StoreLimits(deletion_grace_s=0)).run()
        writer = small.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("logs", 1, roll=RollPolicy(max_rows=ROWS, max_age_s=3600))
            append_patiently(writer, "logs", 1, _batch(0))
            writer.flush()
        finally:
            writer.close()
        return write_segment(directory, table, *args, **kw)

    report = _consolidator(small, write=retention_then_a_seal).run()
    assert report.merged == [] and report.conflicts == 1
    [other] = small.manifest.segments("logs", partitions=[1])
    assert other.state == SegmentState.SEALED
    assert small.read("logs", partitions=[1]).to_table().num_rows == ROWS
    assert len(small.manifest.segments("logs", partitions=[0])) == SEGMENTS - 1


def test_a_partition_a_writer_owns_is_merged_only_under_its_guard(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600), index=INDEX)
        for i in range(4):
            append_patiently(writer, "logs", 0, _batch(i * ROWS))
        writer.flush()
        assert _consolidator(store).run().merged == []  # its lock is held: skipped
        guarded = _consolidator(store, guard=writer.maintaining)
        assert len(guarded.run().merged) == 1
        append_patiently(writer, "logs", 0, _batch(4 * ROWS))
        writer.flush()
        with writer.maintaining("logs", 0) as held:
            assert held
            with writer.maintaining("logs", 0) as again:
                assert not again
        with writer.maintaining("logs", 9) as other:
            assert not other
    finally:
        writer.close()
    assert store.read("logs").to_table().column("offset").to_pylist() == list(range(5 * ROWS))


def test_rebuild_records_a_consolidated_file_under_its_own_name(
    small: Store, empty_manifest: EmptyManifest
) -> None:
    before = _rows(small)
    _consolidator(small).run()
    Retention(small, limits=StoreLimits(deletion_grace_s=0)).run()
    data, url = _rebuild(small, empty_manifest)[1:]
    with Store.open(data, manifest_url=url) as store:
        [row] = store.manifest.segments("logs")
        assert row.path.endswith(f"{0:020d}-{SEGMENTS * ROWS:020d}.arrow")
        assert store.read("logs").to_table().equals(before)


def test_stats_match_for_a_merged_segment(small: Store) -> None:
    _consolidator(small).run()
    [merged] = small.manifest.segments("logs")
    stats: SegmentStats = merged.stats
    assert (stats.start_offset, stats.end_offset) == (0, SEGMENTS * ROWS)
    columns = small.manifest.column_stats("logs", ["status"])[merged.id]["status"]
    assert (columns.min_value, columns.max_value) == ("200", "202")


def _rebuild(store: Store, empty_manifest: EmptyManifest) -> tuple[RebuildReport, Path, str | None]:
    """Close the store and rebuild its manifest into an empty one of the same kind."""
    data = store.data_dir
    store.close()
    url = empty_manifest(store)
    return rebuild_manifest(data, url), data, url


def test_rebuild_in_the_deletion_grace_retires_the_replaced_files(
    small: Store, empty_manifest: EmptyManifest
) -> None:
    """The merged file and its inputs side by side: the merged one is served, the inputs are
    recorded as retired (not quarantined as overlaps), and retention then removes them."""
    before = _rows(small)
    _consolidator(small, ConsolidatePolicy(target_bytes=10**9, min_age_s=0)).run()
    report, data, url = _rebuild(small, empty_manifest)
    assert report.quarantined == [] and report.set_aside == []
    assert len(report.retired) == SEGMENTS
    assert [p.records for p in report.partitions] == [SEGMENTS * ROWS]
    with Store.open(data, manifest_url=url) as store:
        [row] = store.manifest.segments("logs")
        assert row.path.endswith(f"{0:020d}-{SEGMENTS * ROWS:020d}.arrow")
        assert store.read("logs").to_table().equals(before)
        Retention(store, limits=StoreLimits(deletion_grace_s=0)).run()
        assert _files(store) == [row.path.rsplit("/", 1)[1]]
        assert len(store.manifest.segments("logs", states=tuple(SegmentState))) == 1


def test_rebuild_prefers_the_widest_of_nested_consolidations(
    small: Store, empty_manifest: EmptyManifest
) -> None:
    """A merge of merges, with every earlier file still in its grace: the widest file holds
    the rows, whatever the names' sort order."""
    before = _rows(small)
    half = ConsolidatePolicy(target_bytes=_segment_bytes(small) * SEGMENTS // 2, min_age_s=0)
    assert len(_consolidator(small, half).run().merged) >= 2
    assert len(_consolidator(small).run().merged) == 1
    report, data, url = _rebuild(small, empty_manifest)
    assert report.quarantined == []
    with Store.open(data, manifest_url=url) as store:
        [row] = store.manifest.segments("logs")
        assert row.path.endswith(f"{0:020d}-{SEGMENTS * ROWS:020d}.arrow")
        assert store.read("logs").to_table().equals(before)


def _segment_bytes(store: Store) -> int:
    return max(s.size_bytes for s in store.manifest.segments("logs"))


def test_segments_at_or_above_merge_below_are_left_as_sealed(small: Store) -> None:
    """A partition busy enough to seal large segments each second is read well enough as
    sealed; rewriting all its traffic halved the produce rate while a pass ran."""
    rows = small.manifest.segments("logs")
    now = max(r.created_at for r in rows)
    smallest, size = min(r.size_bytes for r in rows), max(r.size_bytes for r in rows)
    at_size = ConsolidatePolicy(target_bytes=10**9, min_age_s=0, merge_below_bytes=smallest)
    assert at_size.small_below == smallest
    assert plan_runs(rows, at_size, now) == []
    above = ConsolidatePolicy(target_bytes=10**9, min_age_s=0, merge_below_bytes=size + 1)
    assert [len(r) for r in plan_runs(rows, above, now)] == [SEGMENTS]
    # Over the target, the target bounds it.
    over = ConsolidatePolicy(target_bytes=size * 3, min_age_s=0, merge_below_bytes=10**9)
    assert over.small_below == size * 3
    assert [len(r) for r in plan_runs(rows, over, now)] == [3, 3, 3, 3]
    with pytest.raises(InvalidInputError, match="merge_below"):
        ConsolidatePolicy(merge_below_bytes=0)


def test_a_merge_that_would_cross_the_disk_floor_waits(small: Store) -> None:
    """A merge writes the run's rows again while the run's files wait out the deletion grace:
    below min_free_disk it would take the space the floor keeps, which retention, counting
    the retired run as freed already, never makes up for."""
    floor = 10**6
    run_bytes = sum(s.size_bytes for s in small.manifest.segments("logs"))
    free = {"bytes": floor + run_bytes - 1}
    consolidator = _consolidator(small, min_free_disk_bytes=floor, disk_free=lambda: free["bytes"])
    report = consolidator.run()
    assert (report.merged, report.deferred) == ([], 1)
    assert len(_files(small)) == SEGMENTS
    assert len(small.manifest.segments("logs", states=tuple(SegmentState))) == SEGMENTS
    free["bytes"] = floor + run_bytes  # room for the merged file: the next pass merges
    assert [m.segments for m in consolidator.run().merged] == [SEGMENTS]


def test_a_corrupt_file_is_quarantined_and_the_other_runs_are_merged(store: Store) -> None:
    """A run with a corrupt file stayed as it was and stopped the pass, every pass: no other
    topic was merged again until something else quarantined the file."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        for topic in ("a", "b"):
            writer.acquire(topic, 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600))
            for i in range(4):
                append_patiently(writer, topic, 0, _batch(i * ROWS))
        writer.flush()
    finally:
        writer.close()
    damaged = store.manifest.segments("a")[1]
    assert damaged.checksums is not None
    position, length, _ = damaged.checksums.batches[-1]
    path = store.segment_path(damaged)
    raw = bytearray(path.read_bytes())
    raw[position + length // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    consolidator = Consolidator(store, {"a": NOW_POLICY, "b": NOW_POLICY}, fsync=False)

    first = consolidator.run()

    assert (first.unreadable, [(m.topic, m.segments) for m in first.merged]) == (1, [("b", 4)])
    states = {
        s.start_offset: s.state for s in store.manifest.segments("a", states=tuple(SegmentState))
    }
    assert states[damaged.start_offset] == SegmentState.QUARANTINED
    second = consolidator.run()  # plans around the quarantined file
    assert second.unreadable == 0
    assert sorted((m.start_offset, m.end_offset) for m in second.merged) == [(2 * ROWS, 4 * ROWS)]
    offsets = store.read("a", columns=["offset"]).to_table().column("offset").to_pylist()
    assert offsets == [*range(ROWS), *range(2 * ROWS, 4 * ROWS)]


class _CountingPace(Pace):
    """Says yes to `allowed` runs, then no (a stop), noting each run's bytes."""

    def __init__(self, allowed: int) -> None:
        super().__init__(None)
        self.allowed = allowed
        self.asked: list[int] = []

    def take(self, nbytes: int, stopped: Wait) -> bool:
        self.asked.append(nbytes)
        return len(self.asked) <= self.allowed


def test_each_run_is_paced_by_its_bytes_and_a_stop_ends_the_pass(small: Store) -> None:
    """Unpaced, a pass after a busy minute merged everything at once, taking the disk and the
    cores from ingestion in a burst."""
    rows = small.manifest.segments("logs")
    policy = ConsolidatePolicy(target_bytes=rows[0].size_bytes * 5, min_age_s=0)
    pace = _CountingPace(allowed=2)
    report = _consolidator(small, policy, pace=pace).run()
    run_bytes = [sum(s.size_bytes for s in rows[a:b]) for a, b in ((0, 5), (5, 10), (10, 12))]
    assert pace.asked == run_bytes  # the third was asked for, and the stop came
    assert [m.segments for m in report.merged] == [5, 5]
    assert len(small.manifest.segments("logs")) == 4  # two merged, two left for a pass
    pace.allowed = len(pace.asked) + 1
    assert [m.segments for m in _consolidator(small, policy, pace=pace).run().merged] == [2]


def test_stop_ends_a_pass_waiting_on_its_pace(small: Store) -> None:
    rows = small.manifest.segments("logs")
    policy = ConsolidatePolicy(target_bytes=rows[0].size_bytes * 6, min_age_s=0)
    # One byte a second: the second run would start hours after the first.
    consolidator = _consolidator(small, policy, pace=Pace(1))
    reports: list[ConsolidationReport] = []
    passing = threading.Thread(target=lambda: reports.append(consolidator.run()), daemon=True)
    passing.start()
    deadline = time.monotonic() + 60
    while len(small.manifest.segments("logs")) == SEGMENTS and time.monotonic() < deadline:
        time.sleep(0.01)
    consolidator.stop()
    passing.join(60)
    assert not passing.is_alive()
    assert [m.segments for m in reports[0].merged] == [6]
    assert consolidator.pace.waited_s == 0  # the wait was cut short, not sat out
