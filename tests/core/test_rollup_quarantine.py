"""A quarantined raw segment takes the roll-up rows sealed from it out of reads too: the
roll-up counts what the raw topic still reads."""

from __future__ import annotations

import pyarrow as pa
import pytest

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.consolidate import Consolidator
from plateau_core.manifest import SegmentRecord, SegmentState
from plateau_core.policies import ConsolidatePolicy
from plateau_core.reader import SegmentCorruptError
from plateau_core.rollup import RollupPolicy, reaggregate, rollup_metrics
from tests.support import append_patiently

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000
ROWS = 50
SEGMENTS = 4
POLICY = RollupPolicy("1m", 60_000, ("service",), rollup_metrics(["count", "sum:latency"]))


def _seal(store: Store) -> None:
    """Four 50-row raw segments, each rolled up into its own roll-up segment."""
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_rows=ROWS, max_age_s=3600), rollups=(POLICY,))
        for at in range(0, SEGMENTS * ROWS, 25):
            offsets = list(range(at, at + 25))
            batch = pa.RecordBatch.from_pydict(
                {
                    "offset": pa.array(offsets, pa.int64()),
                    "timestamp": pa.array([BASE_MS + o * 100 for o in offsets], TS),
                    "service": ["api" if o % 3 else "web" for o in offsets],
                    "latency": pa.array(offsets, pa.int64()),
                }
            )
            append_patiently(writer, "logs", 0, batch)
        writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)


def _corrupt(store: Store, segment: SegmentRecord) -> None:
    assert segment.checksums is not None
    position, length, _ = segment.checksums.batches[-1]
    path = store.segment_path(segment)
    raw = bytearray(path.read_bytes())
    raw[position + length // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def _raw_totals(store: Store) -> tuple[int, int]:
    table = store.read("logs").to_table()
    return table.num_rows, sum(table.column("latency").to_pylist())


def _rollup_totals(store: Store) -> tuple[int, int]:
    table = reaggregate(store.read("logs.rollup.1m").to_table(), POLICY)
    return sum(table.column("count").to_pylist()), sum(table.column("sum_latency").to_pylist())


def test_a_raw_segment_a_read_quarantines_takes_its_roll_up_rows_with_it(store: Store) -> None:
    _seal(store)
    damaged = store.manifest.segments("logs")[1]
    _corrupt(store, damaged)
    with pytest.raises(SegmentCorruptError):  # the read that finds the damage quarantines
        store.read("logs").to_table()
    kept = [o for o in range(SEGMENTS * ROWS) if not ROWS <= o < 2 * ROWS]
    assert _raw_totals(store) == (len(kept), sum(kept))
    assert store.manifest.segment_state(damaged.id) == SegmentState.QUARANTINED
    assert _rollup_totals(store) == _raw_totals(store)
    [withheld] = store.manifest.segments("logs.rollup.1m", states=(SegmentState.QUARANTINED,))
    assert withheld.start_offset == damaged.start_offset
    assert [s.start_offset for s in store.manifest.segments("logs.rollup.1m")] == [0, 100, 150]


def test_a_consolidated_roll_up_segment_with_its_rows_is_withheld_whole(store: Store) -> None:
    """The roll-up rows of four raw segments merged into one file: the file cannot be cut
    without its partition's lock, so it is quarantined whole, its problem saying why; the
    roll-up then counts less than the raw read, never more."""
    _seal(store)
    policy = ConsolidatePolicy(target_bytes=10**9, min_age_s=0)
    report = Consolidator(store, {"logs.rollup.1m": policy}, fsync=False).run()
    assert [m.segments for m in report.merged] == [SEGMENTS]
    damaged = store.manifest.segments("logs")[2]
    _corrupt(store, damaged)
    with pytest.raises(SegmentCorruptError):
        store.read("logs").to_table()
    [withheld] = store.manifest.segments("logs.rollup.1m", states=(SegmentState.QUARANTINED,))
    assert (withheld.start_offset, withheld.end_offset) == (0, 3 * ROWS + 1)
    assert withheld.problem is not None and "withheld whole" in withheld.problem
    assert store.read("logs.rollup.1m").to_table().num_rows == 0
