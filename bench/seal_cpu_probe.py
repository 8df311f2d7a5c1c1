"""The seal threads' CPU per record under the Kafka API, in process, with segments written
with O_DIRECT and through the page cache (plateau_core.direct_io), alternating.

Produce requests as bench/listener_probe.py builds them (the Java client's defaults at 1 KiB:
8 partitions of one 15-record batch each, acks=all), but of random-letter values, which the
adaptive codec writes uncompressed as it does in bench/produce_bench.py. Each seal is timed
on its own thread (time.thread_time around the pool's seal: building the rows, writing,
checksumming, syncing and committing); the figure is that CPU over the records sealed,
the seals at shutdown included. The buffered rounds set direct_io.ARENA_MAX_BYTES to 0, so
every segment takes the buffered path.

    .venv/bin/python bench/seal_cpu_probe.py --requests 1200 --rounds 3
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import string
import sys
import tempfile
import threading
import time
from pathlib import Path

import listener_probe

from bridge.logs import configure_logging
from plateau_core import direct_io
from plateau_core.seal_pool import SealPool
from plateau_core.slog import SealJob

_LETTERS = bytes.maketrans(bytes(range(256)), (string.ascii_letters.encode() * 5)[:256])


def random_letters(size: int) -> bytes:
    """A value of `size` random letters, for listener_probe's batches."""
    return os.urandom(size).translate(_LETTERS)


class SealClock:
    """The CPU the pool's seal threads spend sealing, and the records they sealed."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.records = 0
        self._lock = threading.Lock()
        self._seal = SealPool._seal

    def install(self) -> None:
        clock, real = self, self._seal

        def timed(pool: SealPool, group: list[SealJob]) -> None:
            started = time.thread_time()
            try:
                real(pool, group)
            finally:
                used = time.thread_time() - started
                with clock._lock:
                    clock.cpu += used
                    clock.records += sum(job.rows for job in group)

        SealPool._seal = timed  # type: ignore[method-assign,assignment]

    def reset(self) -> None:
        with self._lock:
            self.cpu, self.records = 0.0, 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=1200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--dir", type=Path, default=None, help="parent of the stores")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    gc.freeze()
    gc.set_threshold(100_000, 20, 20)
    listener_probe.value = random_letters  # batch() looks it up when called
    clock = SealClock()
    clock.install()
    arena_max = direct_io.ARENA_MAX_BYTES
    results: dict[str, list[float]] = {"buffered": [], "direct": []}
    for index in range(args.rounds):
        for way, found in results.items():
            direct_io.ARENA_MAX_BYTES = arena_max if way == "direct" else 0
            clock.reset()
            with tempfile.TemporaryDirectory(prefix="plateau-seal-probe-", dir=args.dir) as tmp:
                listener_probe.one(
                    Path(tmp), args.requests, args.size, listener_probe.PARTITIONS, None
                )
            per_record = clock.cpu / clock.records * 1e6
            found.append(per_record)
            print(
                f"round {index} {way:8s}: seal threads {per_record:5.2f} us CPU/record "
                f"({clock.cpu:.2f} s for {clock.records} records)",
                flush=True,
            )
    base = statistics.median(results["buffered"])
    for way, values in results.items():
        mid = statistics.median(values)
        print(f"{way:8s} median {mid:5.2f} us CPU/record ({(1 - mid / base) * 100:+.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
