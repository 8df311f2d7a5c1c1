"""Start-up: how long `plateau serve` takes to land its first record, and how long `plateau
status` and `plateau check` take to answer.

One local broker for the whole run. For `serve`, each repetition uses a fresh store and a
fresh consumer group on a topic that already holds records, with `roll.max_rows: 1`, so the
first poll seals at once: the time measured is from starting the process until the manifest
holds a segment (polled every 5 ms). A plain confluent-kafka consumer joining a group and
receiving its first message from the same topic is the baseline. `status` and `check` are
timed as whole processes against a store that holds the topic.

`--tree DIR` runs the plateau of another checkout (its `python -m bridge.cli`), so two
versions are measured in one run on the same broker:

    .venv/bin/python bench/startup_bench.py --repeat 5 --tree /path/to/other/checkout
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from ingest_bench import PYTHON, REPO, BenchError, broker

from bridge.demo.producer import Record, produce
from bridge.local_kafka.topics import create_topic

PARTITIONS = 4
RECORDS = 1000
POLL_S = 0.005
TIMEOUT_S = 60.0

_PLAIN_CONSUMER = """
import sys, time
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[3],
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "partition.assignment.strategy": "cooperative-sticky"})
consumer.subscribe([sys.argv[2]])
while True:
    message = consumer.poll(0.05)
    if message is not None and message.error() is None:
        print("first", flush=True)
        break
consumer.close()
"""


def config_text(bootstrap: str, topic: str, data_dir: Path, group: str) -> str:
    return json.dumps(
        {
            "kafka": {"bootstrap_servers": bootstrap, "group_id": group},
            "storage": {"data_dir": str(data_dir)},
            "defaults": {"roll": {"max_rows": 1}},
            "topics": [{"source": topic}],
            "metrics": {"listen": "127.0.0.1:0"},
        }
    )


def first_segment_s(tree: Path, config: Path, data_dir: Path) -> float:
    """Seconds from starting `plateau serve` until its manifest holds a segment."""
    manifest = data_dir / "manifest.db"
    started = time.monotonic()
    process = subprocess.Popen(
        [PYTHON, "-m", "bridge.cli", "--log-level", "WARNING", "serve", "-c", str(config)],
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while time.monotonic() - started < TIMEOUT_S:
            if process.poll() is not None:
                raise BenchError(f"serve exited {process.returncode}: {_tail(process)}")
            if manifest.exists() and _segments(manifest) > 0:
                return time.monotonic() - started
            time.sleep(POLL_S)
        raise BenchError(f"no segment within {TIMEOUT_S}s")
    finally:
        process.terminate()
        process.wait(30)


def _segments(manifest: Path) -> int:
    try:
        with sqlite3.connect(f"file:{manifest}?mode=ro", uri=True, timeout=1) as conn:
            return int(conn.execute("SELECT count(*) FROM segments").fetchone()[0])
    except sqlite3.Error:
        return 0  # not created or not migrated yet


def _tail(process: subprocess.Popen[bytes]) -> str:
    assert process.stderr is not None
    return process.stderr.read().decode(errors="replace")[-2000:]


def command_s(tree: Path, command: str, config: Path) -> float:
    started = time.monotonic()
    result = subprocess.run(
        [PYTHON, "-m", "bridge.cli", "--log-level", "WARNING", command, "-c", str(config)],
        cwd=tree,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise BenchError(f"{command} exited {result.returncode}: {result.stderr[-2000:]!r}")
    return seconds


def plain_consumer_s(bootstrap: str, topic: str) -> float:
    started = time.monotonic()
    subprocess.run(
        [PYTHON, "-c", _PLAIN_CONSUMER, bootstrap, topic, f"plain-{uuid.uuid4().hex[:8]}"],
        check=True,
        timeout=TIMEOUT_S,
        capture_output=True,
    )
    return time.monotonic() - started


def measure(tree: Path, bootstrap: str, topic: str, work: Path, repeat: int) -> dict[str, Any]:
    serve: list[float] = []
    status: list[float] = []
    check: list[float] = []
    for i in range(repeat):
        data_dir = work / f"{tree.name}-{i}" / "data"
        config = data_dir.parent / "plateau.yaml"
        data_dir.parent.mkdir(parents=True)
        group = f"startup-{uuid.uuid4().hex[:8]}"
        config.write_text(config_text(bootstrap, topic, data_dir, group))
        serve.append(first_segment_s(tree, config, data_dir))
        status.append(command_s(tree, "status", config))
        check.append(command_s(tree, "check", config))
    return {
        # The checkout's revision, not its path: results are kept in the repository.
        "tree": _revision(tree),
        "serve_first_record_s": _summary(serve),
        "status_s": _summary(status),
        "check_s": _summary(check),
    }


def _revision(tree: Path) -> str:
    """The short commit of the checkout at `tree`, with "+changes" when it has edits."""
    git = ["git", "-C", str(tree)]
    head = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    if head.returncode != 0:
        return tree.name
    dirty = subprocess.run(
        [*git, "status", "--porcelain"], capture_output=True, text=True, check=False
    )
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--tree", type=Path, action="append", default=[], help="another checkout to measure"
    )
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    trees = [REPO, *(t.resolve() for t in args.tree)]
    with tempfile.TemporaryDirectory(prefix="plateau-startup-") as tmp:
        work = Path(tmp)
        with broker(work, heap="512m") as kafka:
            bootstrap = kafka.bootstrap_servers
            topic = "startup-bench"
            create_topic(bootstrap, topic, PARTITIONS)
            records = (Record(value=b"x" * 128, partition=i % PARTITIONS) for i in range(RECORDS))
            produce(bootstrap, topic, records)
            plain = [plain_consumer_s(bootstrap, topic) for _ in range(args.repeat)]
            results = {
                "repeat": args.repeat,
                "plain_consumer_first_record_s": _summary(plain),
                "trees": [measure(tree, bootstrap, topic, work, args.repeat) for tree in trees],
            }
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
