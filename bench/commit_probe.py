"""The manifest's seal commit on its own: CPU per recorded segment, one segment per
transaction (commit_segment) and eight per transaction (commit_seal, what the writer's
group commit does when seals finish together), and the wall time per transaction. Each
segment carries one idempotent producer's batch, as produced partitions do.

    .venv/bin/python bench/commit_probe.py               # SQLite (the default manifest)
    .venv/bin/python bench/commit_probe.py --postgres    # and PostgreSQL beside it

--postgres starts a throwaway PostgreSQL server on loopback (pgserver, a development
dependency) in a temporary folder; its own CPU is not in the figures, only plateau's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
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


def probe(label: str, manifest_url: Callable[[], str | None]) -> None:
    for grouped in (False, True):
        with (
            tempfile.TemporaryDirectory() as tmp,
            Store.open(Path(tmp), manifest_url=manifest_url()) as store,
        ):
            cpu, wall = time.process_time(), time.perf_counter()
            for round_ in range(ROUNDS):
                group = commits(round_)
                if grouped:
                    store.manifest.commit_seal(group)
                else:
                    for one in group:
                        store.manifest.commit_seal([one])
            per = (time.process_time() - cpu) / (ROUNDS * PARTITIONS) * 1000
            transactions = ROUNDS if grouped else ROUNDS * PARTITIONS
            per_commit = (time.perf_counter() - wall) / transactions * 1000
        kind = f"{PARTITIONS} per transaction" if grouped else "1 per transaction"
        print(
            f"{label:10} {kind:20} {per:.3f} ms CPU per segment, "
            f"{per_commit:.2f} ms per transaction"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", action="store_true", help="also on a PostgreSQL manifest")
    args = parser.parse_args()
    probe("sqlite", lambda: None)
    if args.postgres:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.postgres_server import postgres_server  # noqa: PLC0415

        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")  # pgserver's

        with tempfile.TemporaryDirectory() as pgdata, postgres_server(Path(pgdata)) as server:
            probe("postgresql", server.new_database)


if __name__ == "__main__":
    main()
