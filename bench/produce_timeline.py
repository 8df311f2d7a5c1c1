"""Where an acks=all Produce request's time in `plateau serve` goes: each request timed from
its last byte read to its answer handed to the socket, in five steps, under the Java
producer's defaults.

serve runs with hooks on the listener's frame reader, the journal (each group appended,
each write and sync) and the landing (each durability notice on the event loop); the perf
test then sends `--records` records. Per request:

  parse+append    the frame read -> its group queued to the journal (parse, checks, offsets)
  journal queue   queued -> the journal's write that holds it begins (the write before it)
  write+sync      that write and its fdatasync, until its thread holds the interpreter again
  sync->loop      -> the event loop hears it (the journal thread's turn, the loop's wake-up)
  loop->answer    -> its response is handed to the socket (in order per connection)

Requests and groups are paired in order (one group per Produce request, every other request
of the run is before the perf test's). Reported: mean, p50 and p90 of each step (ms).

    .venv/bin/python bench/produce_timeline.py --records 1000000 --size 1024
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ingest_bench import PYTHON, REPO
from produce_bench import free_port, listener_config, perf_test, wait_port

# serve with the hooks; the events go to the file named first on its command line at exit.
_SERVE = r"""
import atexit, json, sys, time
from pathlib import Path
from bridge.kafka_api import framing, landing
from plateau_core import journal

out = sys.argv.pop(1)
clock = time.perf_counter
events = {"frame": [], "append": [], "write": [], "journaled": [], "answer": []}

read = framing.FramedConnection.buffer_updated
def buffer_updated(self, nbytes):
    reading = self._body is not None
    read(self, nbytes)
    if reading and self._body is None:
        events["frame"].append(clock())
framing.FramedConnection.buffer_updated = buffer_updated

queue = journal.Journal.append
def append(self, appends, prepared):
    seq = queue(self, appends, prepared)
    events["append"].append((seq, clock()))
    return seq
journal.Journal.append = append

flush = journal.Journal._write
def write(self, batch):
    began = clock()
    flush(self, batch)
    events["write"].append((batch[0].seq, batch[-1].seq, began, clock()))
journal.Journal._write = write

heard = landing.Landing.journaled
def journaled(self, seq):
    events["journaled"].append((seq, clock()))
    heard(self, seq)
landing.Landing.journaled = journaled

send = framing.FramedConnection.write
def answer(self, data):
    now, view, at, count = clock(), memoryview(data), 0, 0
    while at + 4 <= len(view):
        at += 4 + int.from_bytes(view[at : at + 4], "big")
        count += 1
    events["answer"].append((count, now))
    send(self, data)
framing.FramedConnection.write = answer

atexit.register(lambda: Path(out).write_text(json.dumps(events)))
from bridge.cli import main
sys.exit(main(sys.argv[1:]))
"""

STEPS = ("parse+append", "journal queue", "write+sync", "sync->loop", "loop->answer", "total")


def steps(events: dict[str, list[object]], requests: int) -> dict[str, list[float]]:
    """Each step's seconds for the last `requests` produce requests."""
    frames: list[float] = events["frame"]  # type: ignore[assignment]
    appends: list[tuple[int, float]] = events["append"]  # type: ignore[assignment]
    began: dict[int, float] = {}
    ended: list[tuple[int, float]] = []
    for first, last, start, end in events["write"]:  # type: ignore[misc]
        for seq in range(first, last + 1):
            began[seq] = start
        ended.append((last, end))
    ended.sort()
    heard = sorted(events["journaled"])  # type: ignore[type-var]
    answers: list[float] = []
    for count, at in events["answer"]:  # type: ignore[misc]
        answers += [at] * count
    n = min(requests, len(frames), len(appends), len(answers))
    frames, appends, answers = frames[-n:], appends[-n:], answers[-n:]
    found: dict[str, list[float]] = {step: [] for step in STEPS}
    end_seqs = [seq for seq, _ in ended]
    heard_seqs = [seq for seq, _ in heard]
    for frame, (seq, queued), answered in zip(frames, appends, answers, strict=True):
        i = bisect.bisect_left(end_seqs, seq)
        j = bisect.bisect_left(heard_seqs, seq)
        if seq not in began or i == len(ended) or j == len(heard) or queued < frame:
            continue
        synced, noticed = ended[i][1], heard[j][1]
        for step, seconds in zip(
            STEPS,
            (
                queued - frame,
                began[seq] - queued,
                synced - began[seq],
                noticed - synced,
                answered - noticed,
                answered - frame,
            ),
            strict=True,
        ):
            found[step].append(seconds)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--warm", type=int, default=100_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plateau-produce-timeline-") as tmp:
        work = Path(tmp)
        port = free_port()
        config = work / "serve.json"
        config.write_text(json.dumps(listener_config(port, work / "store")))
        out = work / "events.json"
        command = [PYTHON, "-c", _SERVE, str(out), "--log-level", "WARNING", "serve"]
        serve = subprocess.Popen([*command, "--config", str(config)], cwd=REPO)
        try:
            wait_port(port)
            bootstrap = f"127.0.0.1:{port}"
            perf_test(bootstrap, "t", args.warm, args.size)
            result = perf_test(bootstrap, "t", args.records, args.size)
        finally:
            serve.terminate()
            serve.wait(120)
        events = json.loads(out.read_text())
    # A request carries about 8 batches of 16 KiB: the run's requests, from the records.
    requests = args.records * args.size // (8 * 16384)
    found = steps(events, requests)
    print(f"{result['rate']:,.0f} records/s, {len(found['total'])} requests timed")
    for step in STEPS:
        values = sorted(found[step])
        print(
            f"  {step:14} mean {statistics.mean(values) * 1e3:6.3f} ms   "
            f"p50 {values[len(values) // 2] * 1e3:6.3f}   "
            f"p90 {values[int(len(values) * 0.9)] * 1e3:6.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
