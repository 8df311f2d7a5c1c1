"""A distinct count over a uint64 column counts its values past int64 too: they have no
int64 bytes to hash, and were left out, so such a column counted short."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.bloom import canonical, value_hash
from plateau_core.rollup import RollupPolicy, reaggregate, rollup_metrics
from plateau_core.schema import INT64_MAX, INT64_MIN
from plateau_core.sketches import estimate, merge_sketches, sketch
from tests.support import append_patiently

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000
POLICY = RollupPolicy("1m", 60_000, (), rollup_metrics(["count", "distinct:id"]))
HIGH = [2**63, 2**63 + 1, 2**64 - 1]


def test_uint64_values_past_int64_are_counted(store: Store) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("ids", 0, roll=RollPolicy(max_age_s=3600), rollups=(POLICY,))
        ids = [1, 2, *HIGH, 2**64 - 1, None]
        batch = pa.RecordBatch.from_pydict(
            {
                "offset": pa.array(range(len(ids)), pa.int64()),
                "timestamp": pa.array([BASE_MS + o for o in range(len(ids))], TS),
                "id": pa.array(ids, pa.uint64()),
            }
        )
        append_patiently(writer, "ids", 0, batch)
        writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)
    shown = set(store.read("ids").to_table().column("id").to_pylist()) - {None}
    assert len(shown) == 5
    table = reaggregate(store.read("ids.rollup.1m").to_table(), POLICY)
    assert table.column("distinct_id").to_pylist() == [5.0]


def test_values_int64_holds_keep_their_hashes() -> None:
    """Sketches sealed before merge with new ones: a value int64 holds hashes as it did, its
    8 bytes of two's complement int64, and none past int64 takes one of those hashes."""
    held = [0, 1, -1, 42, INT64_MIN, INT64_MAX]
    before = sorted(value_hash(raw) for v in held if (raw := canonical("int", v)) is not None)
    assert np.frombuffer(sketch("int", held), "<u8").tolist() == before
    merged = merge_sketches([sketch("int", held), sketch("int", HIGH)])
    assert estimate(merged) == float(len(held) + len(HIGH))
    # 2**64 - 1 is not -1, nor 2**63 INT64_MIN, though their 8 bytes are the same.
    assert estimate(sketch("int", [-1, 2**64 - 1, INT64_MIN, 2**63])) == 4.0
