"""A seal's CPU per record with adaptive compression (plateau_core.adaptive_compression) and
with compression always on, and the footprint of both on compressible data.

Alternating pairs: each round writes the same segments once with `compression_adaptive`
off (every seal lz4) and once on, in a fresh store each, through the real Writer (fsync on).
A seal's CPU is the process CPU time (all threads) of appending one segment's records and
flushing them; the first seal of each run is left out (with adaptive compression it is the
compressed sample). Results go to bench/results/compression-<ts>.json.

    .venv/bin/python bench/compression_probe.py                # 1 KiB random letters
    .venv/bin/python bench/compression_probe.py --values log   # the footprint check
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from benchdata import BASE_MS, command_line, machine_info, median, quiet_logs, write_results

from plateau_core import RollPolicy, Store, WriterPolicy

LETTERS = bytes(65 + i % 26 for i in range(256))
TOPIC = "probe"


def values(kind: str, rng: random.Random, rows: int, size: int) -> pa.Array:
    if kind == "letters":  # the Kafka perf test's payload: random uppercase letters
        data = rng.randbytes(rows * size).translate(LETTERS)
        return pa.array([data[i * size : (i + 1) * size] for i in range(rows)], pa.binary())
    lines = []
    for _ in range(rows):
        line = json.dumps(
            {
                "ts": BASE_MS + rng.randrange(10**6),
                "lvl": rng.choice(("INFO", "INFO", "WARN", "ERROR")),
                "svc": rng.choice(("checkout", "cart", "search")),
                "host": f"web-{rng.randrange(32):02d}",
                "req": f"GET /api/v1/orders/{rng.randrange(10**6)}",
                "status": rng.choice((200, 200, 201, 404, 500)),
                "user": f"u{rng.randrange(10**6):06d}",
            }
        ).encode()
        lines.append((line * (size // len(line) + 1))[:size])
    return pa.array(lines, pa.binary())


def segments(kind: str, count: int, rows: int, size: int) -> list[pa.RecordBatch]:
    rng = random.Random(7)
    built = []
    for i in range(count):
        offsets = range(i * rows, (i + 1) * rows)
        built.append(
            pa.RecordBatch.from_pydict(
                {
                    "offset": pa.array(offsets, pa.int64()),
                    "timestamp": pa.array(
                        [BASE_MS + o for o in offsets], pa.timestamp("ms", tz="UTC")
                    ),
                    "value": values(kind, rng, rows, size),
                }
            )
        )
    return built


def run(batches: list[pa.RecordBatch], *, adaptive: bool, root: Path) -> dict[str, Any]:
    store = Store.open(root)
    writer = store.writer(WriterPolicy(compression="lz4", compression_adaptive=adaptive))
    cpu: list[float] = []
    try:
        writer.acquire(TOPIC, 0, roll=RollPolicy(max_rows=10**9, max_age_s=3600))
        for one in batches:
            began = time.process_time()
            writer.append(TOPIC, 0, one)
            writer.flush()
            cpu.append(time.process_time() - began)
        modes = writer.codecs.modes()
    finally:
        writer.close()
    size = sum(s.size_bytes for s in store.manifest.segments(TOPIC))
    store.close()
    rows = batches[0].num_rows
    return {
        "adaptive": adaptive,
        "us_per_record": [round(c / rows * 1e6, 3) for c in cpu],
        "steady_us_per_record": round(median(cpu[1:]) / rows * 1e6, 3),
        "bytes": size,
        "compressed_now": modes.get((TOPIC, 0), True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", choices=("letters", "log"), default="letters")
    parser.add_argument("--rows", type=int, default=10_000, help="records per segment")
    parser.add_argument("--size", type=int, default=1024, help="bytes per record value")
    parser.add_argument("--segments", type=int, default=6, help="segments per run")
    parser.add_argument("--pairs", type=int, default=5, help="alternating pairs")
    args = parser.parse_args()
    quiet_logs()
    batches = segments(args.values, args.segments, args.rows, args.size)
    raw = sum(b.nbytes for b in batches)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="plateau-compression-") as tmp:
        for pair in range(args.pairs):
            # Alternate which goes first, so a warming cache or a neighbour favours neither.
            order = (False, True) if pair % 2 == 0 else (True, False)
            for adaptive in order:
                root = Path(tmp) / f"{pair}-{adaptive}"
                result = run(batches, adaptive=adaptive, root=root)
                runs.append(result)
                print(
                    f"pair {pair} adaptive={adaptive!s:5} "
                    f"{result['steady_us_per_record']:6.2f} us/record  "
                    f"{result['bytes'] / raw:.3f}x of Arrow size"
                )
        summary = {
            case: {
                "steady_us_per_record": median(
                    [r["steady_us_per_record"] for r in runs if r["adaptive"] == adaptive]
                ),
                "bytes": median([r["bytes"] for r in runs if r["adaptive"] == adaptive]),
            }
            for case, adaptive in (("always", False), ("adaptive", True))
        }
        machine = machine_info(Path(tmp))
    for case, figures in summary.items():
        print(
            f"{case:8} median {figures['steady_us_per_record']:.2f} us/record, "
            f"{figures['bytes'] / raw:.3f}x of Arrow size"
        )
    path = write_results(
        "compression",
        {
            "command": command_line(),
            "machine": machine,
            "values": args.values,
            "rows": args.rows,
            "size": args.size,
            "arrow_bytes": raw,
            "runs": runs,
            "summary": summary,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
