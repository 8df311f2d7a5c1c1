"""A writer process for crash tests: resumes each partition from its watermark, writes forever.

Run as `python -m tests.core.crash_writer DATA_DIR PARTITIONS`; the test kills it with SIGKILL.
"""

from __future__ import annotations

import sys
from pathlib import Path

import structlog

from plateau_core import RollPolicy, Store, WriterPolicy
from tests.support import append_patiently, batch


def main() -> None:
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
    data_dir, partitions = Path(sys.argv[1]), int(sys.argv[2])
    store = Store.open(data_dir)
    writer = store.writer(WriterPolicy(writer_threads=2, tick_s=0.01))
    next_offsets = {}
    for p in range(partitions):
        watermark = writer.acquire("crash", p, roll=RollPolicy(max_rows=300, max_age_s=0.05))
        next_offsets[p] = watermark or 0
    print("ready", flush=True)
    while True:
        for p in range(partitions):
            start = next_offsets[p]
            append_patiently(writer, "crash", p, batch(range(start, start + 50), value_size=64))
            next_offsets[p] = start + 50


if __name__ == "__main__":
    main()
