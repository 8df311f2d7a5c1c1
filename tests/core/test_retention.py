"""Retention keeps the footprint fixed: oldest first, crash-safe, reader-safe."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from plateau_core import (
    Retention,
    RetentionPolicy,
    RetentionReport,
    SegmentState,
    Store,
    StoreLimits,
    WriterPolicy,
)
from tests.support import BASE_MS, HOUR_MS, fill_segments


def _starts(store: Store, topic: str = "t", states: Sequence[SegmentState] | None = None) -> list:
    if states is None:
        return [s.start_offset for s in store.manifest.segments(topic)]
    return [s.start_offset for s in store.manifest.segments(topic, states=states)]


def _now_after(hours: float) -> int:
    return BASE_MS + int(hours * HOUR_MS)


def test_max_age_deletes_segments_whose_newest_record_is_too_old(store: Store) -> None:
    fill_segments(store, 0, 5)
    retention = Retention(
        store,
        default=RetentionPolicy(max_age_s=2.5 * 3600),
        limits=StoreLimits(deletion_grace_s=0),
    )
    report = retention.run(now=_now_after(5))
    # Segment i's newest record is at i hours; at 5 h, those older than 2.5 h are 0, 1, 2.
    assert [s.start_offset for s in report.deleted] == [0, 10, 20]
    assert _starts(store) == [30, 40]


def test_max_segments_and_max_bytes_keep_the_newest(store: Store) -> None:
    fill_segments(store, 0, 6)
    fill_segments(store, 0, 1, topic="other")
    size = store.manifest.segments("t")[0].size_bytes
    retention = Retention(
        store,
        topics={
            "t": RetentionPolicy(max_segments=4),
            "other": RetentionPolicy(max_bytes=1),
        },
        limits=StoreLimits(deletion_grace_s=0),
    )
    retention.run(now=_now_after(6))
    assert _starts(store) == [20, 30, 40, 50]
    assert _starts(store, "other") == []

    retention.topics["t"] = RetentionPolicy(max_bytes=size * 2 + size // 2)
    retention.run(now=_now_after(6))
    assert _starts(store) == [40, 50]


def test_oldest_first_across_partitions(store: Store) -> None:
    fill_segments(store, 0, 3)
    fill_segments(store, 1, 3)
    retention = Retention(
        store, default=RetentionPolicy(max_segments=3), limits=StoreLimits(deletion_grace_s=0)
    )
    retention.run(now=_now_after(3))
    remaining = [(s.partition, s.start_offset) for s in store.manifest.segments("t")]
    # The three oldest (hours 0, 0, 1) go; ties broken by partition.
    assert remaining == [(0, 20), (1, 10), (1, 20)]


def test_watermark_survives_deleting_everything(store: Store) -> None:
    fill_segments(store, 0, 3)
    Retention(
        store, default=RetentionPolicy(max_age_s=1), limits=StoreLimits(deletion_grace_s=0)
    ).run(now=_now_after(100))
    assert _starts(store) == []
    assert store.manifest.watermark("t", 0) == 30
    [span] = store.spans("t")
    assert (span.next_offset, span.segments, span.records) == (30, 0, 0)
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        assert writer.acquire("t", 0) == 30
    finally:
        writer.close()


def test_grace_period_keeps_files_for_running_readers(store: Store) -> None:
    fill_segments(store, 0, 3)
    retention = Retention(
        store, default=RetentionPolicy(max_segments=1), limits=StoreLimits(deletion_grace_s=60)
    )
    snapshot = store.read("t")  # a reader that started before retention ran
    report = retention.run(now=_now_after(3))
    assert [s.start_offset for s in report.marked] == [0, 10]
    assert report.deleted == []
    assert _starts(store, states=(SegmentState.DELETING,)) == [0, 10]
    assert store.read("t").to_table().num_rows == 10  # new readers no longer see them
    assert snapshot.to_table().num_rows == 30  # the running reader still reads them all
    later = retention.run(now=_now_after(3) + 61_000)
    assert sorted(s.start_offset for s in later.deleted) == [0, 10]
    assert not (store.data_dir / "topics/t/0/00000000000000000000.arrow").exists()
    assert _starts(store, states=tuple(SegmentState)) == [20]


def test_interrupted_deletion_is_completed(store: Store) -> None:
    fill_segments(store, 0, 2)
    first = store.manifest.segments("t")[0]
    # A crash after the mark (and maybe after the unlink) but before the row went.
    store.manifest.mark_deleting([first.id], at=_now_after(0))
    store.segment_path(first).unlink()
    report = Retention(store, limits=StoreLimits(deletion_grace_s=0)).run(now=_now_after(2))
    assert [s.id for s in report.deleted] == [first.id]
    assert _starts(store, states=tuple(SegmentState)) == [10]


def test_require_replicated_keeps_unreplicated_segments(store: Store) -> None:
    fill_segments(store, 0, 4)
    segments = store.manifest.segments("t")
    assert store.manifest.mark_replicated([segments[1].id]) == [segments[1].id]
    retention = Retention(
        store,
        default=RetentionPolicy(max_segments=1, require_replicated=True),
        limits=StoreLimits(deletion_grace_s=0),
    )
    retention.run(now=_now_after(4))
    # Only the replicated one may go; the unreplicated ones stay although over the limit.
    assert _starts(store) == [0, 20, 30]
    assert retention.forced_total == 0
    [span] = store.spans("t")
    assert span.replicated_offset == 20


def test_global_hard_limit_forces_unreplicated_deletion(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    fill_segments(store, 0, 4)
    fill_segments(store, 0, 2, topic="loose")
    size = store.manifest.segments("t")[0].size_bytes
    manifest_bytes = sum(p.stat().st_size for p in store.manifest.database_files())
    retention = Retention(
        store,
        topics={"t": RetentionPolicy(require_replicated=True)},
        limits=StoreLimits(max_bytes=manifest_bytes + size * 3, deletion_grace_s=0),
    )
    report = retention.run(now=_now_after(6))
    # Topics that allow it give up their oldest first; only then is "t" forced.
    assert [s.topic for s in report.global_marked] == ["loose", "loose"]
    assert [s.start_offset for s in report.forced] == [0]
    assert retention.forced_total == 1
    assert "segment_retired_unreplicated" in capsys.readouterr().out
    assert sum(s.bytes for s in store.spans()) <= size * 3


def test_min_free_disk_frees_the_oldest(store: Store) -> None:
    fill_segments(store, 0, 4)
    first, second = store.manifest.segments("t")[:2]
    free = {"bytes": 1000}
    retention = Retention(
        store,
        limits=StoreLimits(
            min_free_disk_bytes=1000 + first.size_bytes + second.size_bytes, deletion_grace_s=0
        ),
        disk_free=lambda: free["bytes"],
    )
    report = retention.run(now=_now_after(4))
    assert [s.start_offset for s in report.global_marked] == [0, 10]
    assert _starts(store) == [20, 30]


def test_segments_waiting_out_their_grace_count_as_freed_disk(store: Store) -> None:
    """Retired segments keep their files for the deletion grace: the next passes (the
    watch looks ten times a second) must not retire another shortfall's worth each time,
    which took the whole store for a shortfall of two segments."""
    fill_segments(store, 0, 6)
    first, second = store.manifest.segments("t")[:2]
    retention = Retention(
        store,
        limits=StoreLimits(
            min_free_disk_bytes=1000 + first.size_bytes + second.size_bytes,
            deletion_grace_s=300,
        ),
        disk_free=lambda: 1000,  # nothing is freed until the grace ends
    )
    assert [s.start_offset for s in retention.run(now=_now_after(6)).global_marked] == [0, 10]
    assert not retention.over_limits()
    for _ in range(3):
        assert retention.run(now=_now_after(6)).global_marked == []
    assert _starts(store) == [20, 30, 40, 50]


def test_the_disk_floor_counts_what_a_topic_policy_retires_in_the_same_pass(
    store: Store,
) -> None:
    fill_segments(store, 0, 5)
    first = store.manifest.segments("t")[0]
    retention = Retention(
        store,
        default=RetentionPolicy(max_age_s=4.5 * 3600),
        limits=StoreLimits(min_free_disk_bytes=1000 + first.size_bytes // 2, deletion_grace_s=300),
        disk_free=lambda: 1000,  # half a segment short; nothing is freed until the grace ends
    )
    report = retention.run(now=_now_after(5))
    # max_age retires the oldest, which covers the shortfall: the floor takes nothing more.
    assert [s.start_offset for s in report.marked] == [0]
    assert report.global_marked == []
    assert _starts(store) == [10, 20, 30, 40]


def test_background_retention_runs_periodically(store: Store) -> None:
    """The first pass retires two segments; only a later pass, once their deletion grace is
    over, deletes them (no limit is crossed any more to bring a pass on early)."""
    fill_segments(store, 0, 3)
    retention = Retention(
        store, default=RetentionPolicy(max_segments=1), limits=StoreLimits(deletion_grace_s=0.3)
    )
    retention.start(interval_s=0.05)
    try:
        deadline = time.monotonic() + 30
        while len(_starts(store, states=tuple(SegmentState))) > 1:
            assert time.monotonic() < deadline, _starts(store, states=tuple(SegmentState))
            time.sleep(0.02)
    finally:
        retention.stop()
    assert _starts(store, states=tuple(SegmentState)) == [20]
    assert not any(store.data_dir.rglob("00000000000000000000.arrow"))


def test_the_background_loop_reacts_to_a_limit_crossed_between_passes(store: Store) -> None:
    fill_segments(store, 0, 2)
    retention = Retention(
        store, default=RetentionPolicy(max_segments=3), limits=StoreLimits(deletion_grace_s=60)
    )
    assert not retention.over_limits()
    retention.start(interval_s=3600)  # the periodic pass runs once, now, then in an hour
    try:
        fill_segments(store, 0, 3)  # now 5 segments: two over the limit
        deadline = time.monotonic() + 30
        while len(_starts(store)) != 3:
            assert time.monotonic() < deadline, f"not retired: {_starts(store)}"
            time.sleep(0.05)
        assert not retention.over_limits()
    finally:
        retention.stop()


def test_the_watch_counts_only_what_was_sealed_since_its_last_look(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each look sums the segments added since the one before: on a store of hundreds of
    thousands of small segments a sum over all of them, ten times a second, took a core.
    The sums still add up to the store's, and a pass (which may have taken segments out)
    starts the count afresh."""
    fill_segments(store, 0, 3)
    size = store.manifest.segments("t")[0].size_bytes
    retention = Retention(
        store, default=RetentionPolicy(max_bytes=4 * size), limits=StoreLimits(deletion_grace_s=0)
    )
    asked: list[tuple[int, int | None]] = []
    totals = store.manifest.topic_totals

    def spy(*, after_id: int = 0, upto_id: int | None = None) -> dict[str, tuple[int, int]]:
        asked.append((after_id, upto_id))
        return totals(after_id=after_id, upto_id=upto_id)

    monkeypatch.setattr(store.manifest, "topic_totals", spy)
    assert not retention.over_limits()
    last = store.manifest.last_segment_id()
    assert asked == [(0, last)]
    assert not retention.over_limits()  # nothing sealed since: nothing summed
    assert asked == [(0, last)]
    fill_segments(store, 1, 2)  # five segments now, over the topic's four
    assert retention.over_limits()
    assert asked[1:] == [(last, store.manifest.last_segment_id())]
    retention.run(now=_now_after(6))
    live = store.manifest.segments("t")
    assert store.manifest.topic_totals() == {"t": (sum(s.size_bytes for s in live), 4)}
    assert not retention.over_limits()
    assert asked[-1] == (0, store.manifest.last_segment_id())  # recounted after the pass


def test_a_look_recounts_after_a_pass_took_segments_out(store: Store) -> None:
    fill_segments(store, 0, 4)
    retention = Retention(
        store, default=RetentionPolicy(max_segments=3), limits=StoreLimits(deletion_grace_s=60)
    )
    assert retention.over_limits()
    assert [s.start_offset for s in retention.run(now=_now_after(4)).marked] == [0]
    assert not retention.over_limits()
    fill_segments(store, 1, 1)
    assert retention.over_limits()
    assert store.manifest.topic_totals()["t"][1] == 4


class _SlowPasses(Retention):
    """Every pass takes 0.2 s and frees something, and the store stays over its limit."""

    passes = 0

    def run(self, now: int | None = None) -> RetentionReport:
        self.passes += 1
        time.sleep(0.2)
        return RetentionReport(deleted=[self.store.manifest.segments("t")[0]])

    def over_limits(self) -> bool:
        return True


def test_the_watch_spaces_out_passes_that_take_long(store: Store) -> None:
    """A pass lists every live segment: seconds on a large store. A seal crossing the
    store's limit every second must not start them back to back; the watch waits
    PASS_SPACING times a pass's length after it (0.2 s passes: one every 2 s)."""
    fill_segments(store, 0, 1)
    retention = _SlowPasses(store, limits=StoreLimits(max_bytes=1))
    retention.start(interval_s=3600)
    try:
        time.sleep(3.0)
    finally:
        retention.stop()
    # Back to back, 3 s hold about 15 passes of 0.2 s; spaced, 2 (at 0 s and about 2 s).
    assert 1 <= retention.passes <= 3, retention.passes
