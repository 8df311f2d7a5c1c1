"""The manifest's seal commit on its own: CPU per recorded segment, one segment per
transaction (commit_segment) and eight per transaction (commit_seal, what the writer's
group commit does when seals finish together). Each segment carries one idempotent
producer's batch, as produced partitions do.

    .venv/bin/python bench/commit_probe.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pyarrow as pa

from plateau_core import Store
from plateau_core.manifest.records import PartitionCommit, SegmentFile
from plateau_core.producers import ProducerBatch
from plateau_core.segment_stats import SegmentStats

ROUNDS = 300
PARTITIONS = 8
SCHEMA = pa.schema([("offset", pa.int64())])


def commits(round_: int) -> list[PartitionCommit]:
    start = round_ * 10
    stats = SegmentStats(start, start + 10, 10, 0, 1, 100, "f")
    return [
        PartitionCommit(
            "t",
            p,
            (SegmentFile(stats, f"t/{p}/{start}", SCHEMA),),
            (ProducerBatch(1, 0, start, start + 9, start),),
        )
        for p in range(PARTITIONS)
    ]


def main() -> None:
    for grouped in (False, True):
        with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp)) as store:
            cpu = time.process_time()
            for round_ in range(ROUNDS):
                group = commits(round_)
                if grouped:
                    store.manifest.commit_seal(group)
                else:
                    for one in group:
                        store.manifest.commit_seal([one])
            per = (time.process_time() - cpu) / (ROUNDS * PARTITIONS) * 1000
        label = f"{PARTITIONS} per transaction" if grouped else "1 per transaction"
        print(f"{label:20} {per:.3f} ms CPU per segment")


if __name__ == "__main__":
    main()
