"""One journal round's write and sync, four ways, on an idle disk: what writing the Kafka
API's journal with O_DIRECT, or over a recycled file, would save.

  buffered      writev of the round's bytes, then fdatasync (what plateau_core.journal does)
  overwrite     the same into a file whose blocks were written (zeros) and synced before:
                what reusing a sealed journal file would cost, its size and blocks never
                changing, so the sync has no metadata to commit
  direct        the round copied behind the file's last partial block into a page-aligned
                buffer, padded to whole blocks, written with O_DIRECT at that block; then
                fdatasync (the next round writes the partial block again)
  direct-dsync  the same with O_DSYNC instead of the fdatasync

Each way appends `--rounds` rounds of `--bytes` to a fresh file in `--dir`, alternating,
twice. `--beside-seals` adds a thread writing a 16 MiB file with O_DIRECT (and syncing it)
every 100 ms, as serve's seals write segments beside the journal. Reported per way: the
thread's CPU per round (user + system, the copy included) and the latency of a round (mean,
p50, p90, p99). Run it on the data directory's filesystem
(tmpfs refuses O_DIRECT):

    .venv/bin/python bench/journal_io_probe.py --dir .probe-journal --rounds 2000 --bytes 131072
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import threading
import time
from pathlib import Path

BLOCK = 4096
WAYS = ("buffered", "overwrite", "direct", "direct-dsync")


def one_way(directory: Path, way: str, rounds: int, payload: bytes) -> tuple[float, list[float]]:
    """CPU seconds per round, and each round's seconds."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    if way not in ("buffered", "overwrite"):
        flags |= os.O_DIRECT
    if way == "direct-dsync":
        flags |= os.O_DSYNC
    path = directory / f"journal-{way}"
    fd = os.open(path, flags, 0o600)
    aligned = mmap.mmap(-1, len(payload) + 2 * BLOCK)  # page-aligned, as O_DIRECT needs
    end = 0  # the file's logical size
    tail = b""  # its last partial block, written again by the next round
    latencies: list[float] = []
    try:
        if way == "overwrite":
            zeros = bytes(1 << 20)
            for _ in range(-(-rounds * len(payload) // len(zeros))):
                os.write(fd, zeros)
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
        cpu = time.thread_time()
        for _ in range(rounds):
            started = time.perf_counter()
            if way in ("buffered", "overwrite"):
                os.writev(fd, [payload])
                os.fdatasync(fd)
            else:
                data = tail + payload
                padded = -(-len(data) // BLOCK) * BLOCK
                aligned[: len(data)] = data
                aligned[len(data) : padded] = bytes(padded - len(data))
                os.pwrite(fd, memoryview(aligned)[:padded], end - len(tail))
                if way == "direct":
                    os.fdatasync(fd)
                end += len(payload)
                kept = end % BLOCK
                tail = data[len(data) - kept :] if kept else b""
            latencies.append(time.perf_counter() - started)
        return (time.thread_time() - cpu) / rounds, latencies
    finally:
        os.close(fd)
        aligned.close()
        path.unlink()


def seals(directory: Path, stop: threading.Event) -> None:
    """A 16 MiB segment-like file written with O_DIRECT, synced and removed, every 100 ms."""
    body = mmap.mmap(-1, 16 << 20)
    body.write(os.urandom(16 << 20))
    path = directory / "segment"
    try:
        while not stop.is_set():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
            try:
                os.write(fd, body)
                os.fsync(fd)
            finally:
                os.close(fd)
            path.unlink()
            stop.wait(0.1)
    finally:
        body.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="a folder on the disk to probe")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--bytes", type=int, default=128 * 1024, help="one round's bytes")
    parser.add_argument(
        "--beside-seals", action="store_true", help="O_DIRECT segment writes meanwhile"
    )
    args = parser.parse_args(argv)
    created = not args.dir.exists()
    args.dir.mkdir(parents=True, exist_ok=True)
    payload = os.urandom(args.bytes)
    stop = threading.Event()
    writer = threading.Thread(target=seals, args=(args.dir, stop), daemon=True)
    if args.beside_seals:
        writer.start()
    try:
        for _ in range(2):
            for way in WAYS:
                cpu, latencies = one_way(args.dir, way, args.rounds, payload)
                latencies.sort()
                print(
                    f"{way:13} CPU {cpu * 1e6:6.1f} us a round   "
                    f"mean {statistics.mean(latencies) * 1e3:.3f} ms   "
                    f"p50 {latencies[len(latencies) // 2] * 1e3:.3f}   "
                    f"p90 {latencies[int(len(latencies) * 0.9)] * 1e3:.3f}   "
                    f"p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.3f}"
                )
    finally:
        stop.set()
        if writer.is_alive():
            writer.join()
        if created:
            shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
