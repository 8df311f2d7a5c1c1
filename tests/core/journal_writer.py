"""A writer process with a journal for crash tests: replays what the last one left, then
appends groups (a batch to one partition and a record to a second, together) forever,
printing each partition's offset once the journal says the group holding it is durable.

Run as `python -m tests.core.journal_writer DATA_DIR`; the test kills it with SIGKILL.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import structlog

from plateau_core import Append, RollPolicy, Store, WriterPolicy
from plateau_core.journal_replay import replay
from plateau_core.listener import NoListener
from tests.support import append_group_patiently, batch

ROWS = 40


class Acks(NoListener):
    """Prints `seq` lines as groups become durable: what a producer would be told."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[int, str] = {}

    def on_journaled(self, seq: int) -> None:
        with self.lock:
            done = sorted(s for s in self.pending if s <= seq)
            lines = [self.pending.pop(s) for s in done]
        if lines:
            print("\n".join(lines), flush=True)


def main() -> None:
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
    store = Store.open(Path(sys.argv[1]))
    acks = Acks()
    # Seals every 50 ms: a kill lands between journaling and sealing as often as not.
    writer = store.writer(WriterPolicy(writer_threads=2, tick_s=0.01), acks, journal=True)
    roll = RollPolicy(max_age_s=0.05)
    for topic in ("main", "side"):
        writer.acquire(topic, 0, roll=roll)
    replay(writer, lambda topic, partition: writer.acquire(topic, partition, roll=roll))
    main_next, side_next = writer.next_offset("main", 0), writer.next_offset("side", 0)
    print("ready", flush=True)
    while True:
        group = [
            Append("main", 0, (batch(range(main_next, main_next + ROWS), value_size=64),)),
            Append("side", 0, (batch([side_next]),)),
        ]
        with acks.lock:  # before the journal can report it
            seq = append_group_patiently(writer, group)
            acks.pending[seq] = f"acked {main_next + ROWS} {side_next + 1}"
        main_next, side_next = main_next + ROWS, side_next + 1


if __name__ == "__main__":
    main()
