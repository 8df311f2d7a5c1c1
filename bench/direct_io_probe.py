"""write_segment's CPU per byte, O_DIRECT against the page cache (plateau_core.direct_io).

Both ways are the product's own code: the buffered way is write_segment in a directory
marked as refusing O_DIRECT, which is the fallback path (pa.OSFile, checksums read back
through a memory map, fsync); the direct way builds the IPC file in the thread's arena,
checksums it there, writes it with O_DIRECT and fsyncs. The files are compared first: same
bytes either way.

Each way writes the same segments (1 KiB random-letter values, one record batch per segment
as serve's seal builds them), alternating, several rounds; the figure is the calling thread's
CPU time (time.thread_time: user + system) per MiB of segment file, fsyncs included. Run it
on the data directory's filesystem (not tmpfs):

    .venv/bin/python bench/direct_io_probe.py --dir .probe-directio --segments 200 --rounds 3
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import string
import time
from pathlib import Path

import pyarrow as pa

from plateau_core import direct_io
from plateau_core.schema import HEADERS_TYPE, TIMESTAMP_TYPE
from plateau_core.segment_file import write_segment


def segment(first: int, records: int, size: int, rng: random.Random) -> pa.Table:
    """`records` rows of `size`-byte random-letter values, as one record batch."""
    letters = string.ascii_letters.encode()
    now = int(time.time() * 1000)
    values = [bytes(rng.choices(letters, k=size)) for _ in range(records)]
    return pa.table(
        {
            "offset": pa.array(range(first, first + records), pa.int64()),
            "timestamp": pa.array([now] * records, pa.int64()).cast(TIMESTAMP_TYPE),
            "key": pa.nulls(records, pa.binary()),
            "headers": pa.array([[]] * records, HEADERS_TYPE),
            "value": pa.array(values, pa.binary()),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="scratch folder (removed)")
    parser.add_argument("--segments", type=int, default=200)
    parser.add_argument("--segment-mib", type=float, default=8.0)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--distinct", type=int, default=8, help="distinct segment tables")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compression", default="none")
    args = parser.parse_args()

    rng = random.Random(7)
    records = int(args.segment_mib * 1024 * 1024 / args.record_bytes)
    tables = [segment(i * records, records, args.record_bytes, rng) for i in range(args.distinct)]
    ways = ("buffered", "direct")
    folders = {way: args.dir / way for way in ways}
    for folder in folders.values():
        folder.mkdir(parents=True)
    # The fallback path, as for a filesystem that refuses O_DIRECT.
    direct_io._refused.add(str(folders["buffered"]))
    files = {
        way: write_segment(folders[way], tables[0], args.compression)[0].read_bytes()
        for way in ways
    }
    if files["buffered"] != files["direct"]:
        raise SystemExit("the two ways wrote different files")
    print(f"segment file: {len(files['direct']) / 2**20:.2f} MiB, {records} records")

    results: dict[str, list[float]] = {way: [] for way in ways}
    for round_ in range(args.rounds):
        for way in ways:
            cpu = wall = 0.0
            written = 0
            for i in range(args.segments):
                started, used = time.perf_counter(), time.thread_time()
                path, _ = write_segment(
                    folders[way],
                    tables[i % len(tables)],
                    args.compression,
                )
                cpu += time.thread_time() - used
                wall += time.perf_counter() - started
                written += path.stat().st_size
                # Bounded disk use; freeing the file's cached pages is not the write's cost.
                path.unlink()
            per_mib = cpu / (written / 2**20) * 1e3
            results[way].append(per_mib)
            print(
                f"round {round_} {way:8s} {per_mib:5.2f} ms CPU/MiB "
                f"({cpu:.2f} s CPU, {wall:.2f} s wall, {written / 2**20:.0f} MiB)",
                flush=True,
            )
    base = statistics.median(results["buffered"])
    for way, values in results.items():
        mid = statistics.median(values)
        rounds = ", ".join(f"{v:.2f}" for v in values)
        saved = (1 - mid / base) * 100
        print(f"{way:8s} median {mid:5.2f} ms CPU/MiB ({saved:+.0f}% saved), rounds {rounds}")
    shutil.rmtree(args.dir)


if __name__ == "__main__":
    main()
