"""Another process holds the manifest's write lock for several seconds (a backup tool, an
operator's sqlite3 shell): seals wait for it and succeed, nothing fails or is lost."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from structlog.testing import capture_logs

from bridge.demo.producer import Record, produce
from plateau_core import Store
from tests.bridge_support import end_offsets, make_config, serving, wait_landed
from tests.reliability.support import Recorder, every_offset

# Seals have this long, after the last records arrived, to get through the lock (they
# must not): several times the roll's max_age.
WATCH_S = 3.0

# Holds the lock until the test writes a line: the test, not the clock, decides when the
# lock goes, so a slow machine cannot release it while the test still looks for seals.
LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
print("released", flush=True)
"""


def test_seals_wait_for_a_locked_manifest_and_succeed(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, reliability: Recorder
) -> None:
    topic = topic_factory(partitions=2)
    config = make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}")
    produced = produce(kafka, topic, (Record(value=f"a{i}".encode()) for i in range(5_000)))
    with capture_logs() as logs, serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
        locker = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(tmp_path / "manifest.db")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert locker.stdin is not None and locker.stdout is not None
        assert locker.stdout.readline().strip() == "locked"
        locked_at = time.time()
        # Records keep arriving while the lock is held: their seals must queue behind it.
        feeding = threading.Thread(
            target=produce,
            args=(kafka, topic, (Record(value=f"b{i}".encode()) for i in range(20_000))),
        )
        feeding.start()
        feeding.join(timeout=60)
        assert not feeding.is_alive(), "20k records not produced within 60 s"
        produced += 20_000
        during = _watermarks(tmp_path, topic)
        time.sleep(WATCH_S)  # seals of the new records are due meanwhile: none may land
        assert _watermarks(tmp_path, topic) == during, "a seal was recorded through the lock"
        assert sum(end_offsets(kafka, topic).values()) > sum(during.values())
        held_s = time.time() - locked_at
        locker.stdin.write("release\n")
        locker.stdin.flush()
        assert locker.stdout.readline().strip() == "released"
        released_at = time.time()
        locker.wait(timeout=10)
        ends = end_offsets(kafka, topic)
        wait_landed(tmp_path, topic, ends, timeout_s=60)
        recover_s = time.time() - released_at
    assert [e for e in logs if e["event"] == "seal_failed"] == []
    # A segment's created_at is taken when its commit starts: these waited for the lock.
    with Store.open(tmp_path) as store:
        created = [s.created_at / 1000 for s in store.manifest.segments(topic)]
    waited = [t for t in created if locked_at < t < released_at]
    assert waited, "no seal was waiting for the lock"
    reliability.check(
        "Manifest locked by another process",
        f"an sqlite3 client held an exclusive lock on manifest.db for {held_s:.0f} s while "
        "20k records arrived",
        tmp_path,
        topic,
        every_offset(ends),
        produced=produced,
        recover_s=recover_s,
        seals_that_waited=len(waited),
        seal_failures=0,
    )


def _watermarks(data_dir: Path, topic: str) -> dict[int, int]:
    # WAL readers are not blocked by the writer's lock: reading is how the test looks in.
    with Store.open(data_dir) as store:
        return {s.partition: s.next_offset for s in store.spans(topic)}
