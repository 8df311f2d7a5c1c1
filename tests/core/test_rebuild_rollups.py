"""`plateau rebuild-manifest` and roll-ups: a raw file it quarantines as unreadable takes
its roll-up rows out of reads, as quarantining a damaged segment does, so the rebuilt
roll-up counts what the rebuilt raw topic reads."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from plateau_core import SegmentState, Store, WriterPolicy
from plateau_core.consolidate import Consolidator
from plateau_core.policies import ConsolidatePolicy
from plateau_core.rebuild import rebuild_manifest
from plateau_core.rollup import RollupPolicy, reaggregate, rollup_metrics
from tests.support import batch

POLICY = RollupPolicy("1m", 60_000, (), rollup_metrics(["count", "sum:n"]))
ROLLUPS = "a.rollup.1m"


def _seal(store: Store, starts: range) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("a", 0, rollups=(POLICY,))
        for start in starts:
            offsets = range(start, start + 10)
            writer.append("a", 0, batch(offsets, extra={"n": pa.array(offsets, pa.int64())}))
            writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)


def _fill(data: Path, *, consolidate: str | None = None, then: range = range(0)) -> None:
    """Four raw segments of ten records, [0, 10) to [30, 40), each rolled up, consolidated
    in `consolidate`, then the segments starting at `then`."""
    with Store.open(data) as store:
        _seal(store, range(0, 40, 10))
        if consolidate is not None:
            merging = ConsolidatePolicy(target_bytes=10**6, min_age_s=0)
            merged = Consolidator(store, {consolidate: merging}).run().merged
            assert [m.segments for m in merged] == [4]
        _seal(store, then)
    for name in ("manifest.db", "manifest.db-wal", "manifest.db-shm"):
        (data / name).unlink(missing_ok=True)


def _totals(store: Store) -> tuple[tuple[int, int], tuple[int, int]]:
    raw = store.read("a").to_table()
    rolled = reaggregate(store.read(ROLLUPS).to_table(), POLICY)
    return (raw.num_rows, sum(raw.column("n").to_pylist())), (
        sum(rolled.column("count").to_pylist()),
        sum(rolled.column("sum_n").to_pylist()),
    )


def test_an_unreadable_raw_file_takes_its_roll_up_rows_with_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _fill(data)
    damaged = data / "topics/a/0" / f"{10:020d}.arrow"
    damaged.write_bytes(b"not a segment at all")

    report = rebuild_manifest(data)

    withheld = f"topics/{ROLLUPS}/0/{10:020d}.arrow"
    quarantined = {q.path: q.problem for q in report.quarantined}
    assert set(quarantined) == {"topics/a/0/" + damaged.name, withheld}
    assert "rolled up from quarantined segment" in quarantined[withheld]
    segments = {(p.topic, p.segments, p.records) for p in report.partitions}
    assert segments == {("a", 3, 30), (ROLLUPS, 3, 3)}
    with Store.open(data) as store:
        kept = [*range(10), *range(20, 40)]
        assert _totals(store) == ((len(kept), sum(kept)),) * 2
        [rolled] = store.manifest.segments(ROLLUPS, states=(SegmentState.QUARANTINED,))
        assert rolled.start_offset == 10


def test_a_consolidated_roll_up_file_with_its_rows_is_withheld_whole(tmp_path: Path) -> None:
    """It also holds rows of raw segments still read: withheld whole, as a read's
    quarantine does, so the roll-up counts less than the raw topic, never more."""
    data = tmp_path / "data"
    _fill(data, consolidate=ROLLUPS)
    (data / "topics/a/0" / f"{20:020d}.arrow").write_bytes(b"not a segment at all")

    report = rebuild_manifest(data)

    [problem] = [q.problem for q in report.quarantined if q.topic == ROLLUPS]
    assert "withheld whole" in problem
    with Store.open(data) as store:
        assert store.read(ROLLUPS).to_table().num_rows == 0


def test_an_unreadable_input_beside_its_consolidated_segment_withholds_nothing(
    tmp_path: Path,
) -> None:
    """A consolidation's input, left for the deletion grace, unreadable before a readable
    segment: its records are read from the consolidated segment, and so are its roll-up
    rows counted."""
    data = tmp_path / "data"
    _fill(data, consolidate="a", then=range(40, 50, 10))
    left = data / "topics/a/0" / f"{10:020d}.arrow"
    assert left.exists()
    left.write_bytes(b"not a segment at all")

    report = rebuild_manifest(data)

    assert [q.topic for q in report.quarantined] == ["a"]
    with Store.open(data) as store:
        assert _totals(store) == ((50, sum(range(50))),) * 2
        assert store.manifest.segments(ROLLUPS, states=(SegmentState.QUARANTINED,)) == []
