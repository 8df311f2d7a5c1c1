"""Retention on a store of many small segments: what its watch (ten looks a second) and a
pass cost as the segment count grows, against the sums and listings they replaced, in the
same run.

A produced topic seals each partition every second: 8 partitions make 28,800 segments an
hour. The probe records one real segment, copies its manifest row N times (SQLite, no
files: retention reads the manifest only until a deletion's grace ends), then times

  full sum      the aggregate over every segment the watch ran on each look before
  look          `Retention.over_limits()` after its first look: the segments added since
  full records  listing every segment as a full record, what a pass listed before
  ages          listing the columns a pass weighs, what it lists now
  pass          `Retention.run()` with a store limit that retires about 50 segments

    .venv/bin/python bench/retention_probe.py --segments 30000 300000
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from benchdata import write_results

from plateau_core import Retention, StoreLimits, WriterPolicy
from plateau_core.store import Store

PARTITIONS = 8


def _store(folder: Path, segments: int) -> int:
    """A store at `folder` with `segments` rows of one topic; returns a row's size."""
    with Store.open(folder) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("t", 0)
            batch = pa.RecordBatch.from_pydict(
                {
                    "offset": pa.array(range(10), pa.int64()),
                    "timestamp": pa.array(range(10), pa.timestamp("ms", "UTC")),
                    "value": [b"x" * 100] * 10,
                }
            )
            writer.append("t", 0, batch)
            writer.flush()
        finally:
            writer.close()
    with sqlite3.connect(folder / "manifest.db") as db:
        columns = [c[1] for c in db.execute("PRAGMA table_info(segments)") if c[1] != "id"]
        first = db.execute(f"SELECT {','.join(columns)} FROM segments").fetchone()
        template = dict(zip(columns, first, strict=True))
        rows = []
        for i in range(1, segments):
            row = dict(template)
            row.update(
                partition=i % PARTITIONS,
                start_offset=i * 10,
                end_offset=i * 10 + 10,
                time_min=template["time_min"] + i * 1000,
                time_max=template["time_max"] + i * 1000,
                path=f"topics/t/{i % PARTITIONS}/{i * 10:020d}.arrow",
            )
            rows.append(tuple(row[c] for c in columns))
        marks = ",".join("?" * len(columns))
        db.executemany(f"INSERT INTO segments ({','.join(columns)}) VALUES ({marks})", rows)
    return int(template["size_bytes"])


def _median_s(run: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def probe(segments: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="retention-probe-") as folder:
        size = _store(Path(folder), segments)
        with Store.open(folder) as store:
            manifest = store.manifest
            watch = Retention(store, limits=StoreLimits(max_bytes=10**18))
            watch.over_limits()  # the first look sums everything; the later ones what is new
            found = {
                "full_sum_s": _median_s(manifest.topic_totals, repeat),
                "look_s": _median_s(watch.over_limits, repeat * 10),
                "full_records_s": _median_s(manifest.segments, repeat),
                "ages_s": _median_s(manifest.segment_ages, repeat),
            }
            # The store's limit counts the manifest's own bytes too.
            used = segments * size + manifest.database_bytes()
            limit = StoreLimits(max_bytes=used - 50 * size, deletion_grace_s=300)
            began = time.perf_counter()
            report = Retention(store, limits=limit).run()
            found["pass_s"] = time.perf_counter() - began
            found["pass_retired"] = len(report.global_marked)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, nargs="+", default=[30_000, 300_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    results = {str(n): probe(n, args.repeat) for n in args.segments}
    print("| segments | full sum | look | full records | ages | pass (retiring) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, r in results.items():
        print(
            f"| {int(n):,} | {r['full_sum_s'] * 1e3:.1f} ms | {r['look_s'] * 1e3:.2f} ms "
            f"| {r['full_records_s']:.2f} s | {r['ages_s']:.2f} s "
            f"| {r['pass_s']:.2f} s ({int(r['pass_retired'])}) |"
        )
    print(f"results: {write_results('retention', {'segments': results})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
