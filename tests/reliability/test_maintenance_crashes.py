"""kill -9 in the middle of plateau's own work on its store, repeated at random points:
`plateau rebuild-manifest`, and what `plateau serve` does beside ingesting (consolidation,
retention's deletions, roll-up seals, the Kafka API's journal replay at start). After each
scenario nothing is lost or duplicated in what a reader sees, `plateau verify` passes, and
the next run finishes what the killed one started."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from plateau_core import RollPolicy, Store, WriterPolicy
from tests.bridge_support import REPO, free_port, plateau_command
from tests.reliability.support import Recorder, scale
from tests.support import append_patiently, batch


def _rng(default: int) -> random.Random:
    return random.Random(int(os.environ.get("PLATEAU_CRASH_SEED", str(default))))


def _kafka_api_config(
    path: Path, port: int, topics: list[dict[str, object]], **storage: object
) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "storage": {"data_dir": str(path.parent / "data"), **storage},
                "kafka_api": {"listen": f"127.0.0.1:{port}"},
                "metrics": {"listen": "127.0.0.1:0"},
                "topics": topics,
            }
        )
    )
    return path


def _verify(config: Path) -> None:
    result = plateau_command("verify", "--config", str(config), log_level="ERROR")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _command(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bridge.cli", "--log-level", "WARNING", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


# --- rebuild-manifest --------------------------------------------------------------------------


def test_kill_9_during_rebuild_manifest(tmp_path: Path, reliability: Recorder) -> None:
    """rebuild-manifest records the segment files one by one. Killed part-way, the store
    must not open on the half-built manifest: serve would take every file not recorded yet
    for an orphan and delete it. The next rebuild-manifest finishes the job."""
    rng = _rng(11)
    data_dir = tmp_path / "data"
    partitions, segments, rows = 3, scale(80, 200), 50
    store = Store.open(data_dir)
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        for partition in range(partitions):
            writer.acquire("events", partition, roll=RollPolicy(max_rows=rows, max_age_s=3600))
            for i in range(segments):
                append_patiently(
                    writer, "events", partition, batch(range(i * rows, (i + 1) * rows))
                )
        writer.flush()
    finally:
        writer.close()
        store.close()
    ends = {p: segments * rows for p in range(partitions)}
    config = _kafka_api_config(
        tmp_path / "plateau.yaml", free_port(), [{"name": "events", "partitions": partitions}]
    )
    kills = scale(3, 8)
    refused = 0
    for _ in range(kills):
        aside = len(list(data_dir.glob("manifest.db.broken-*")))
        process = _command("rebuild-manifest", "--config", str(config), "--yes")
        deadline = time.monotonic() + 60
        # Killed once the old manifest is moved aside: somewhere in the recording.
        while len(list(data_dir.glob("manifest.db.broken-*"))) == aside:
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "rebuild-manifest did not start within 60 s"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.3 * segments * partitions / 100))
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        # What an operator (or a supervisor) does next: start plateau serve.
        serve = _command("serve", "--config", str(config))
        try:
            status = serve.wait(timeout=5)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            serve.send_signal(signal.SIGTERM)
            stderr = serve.communicate(timeout=60)[1]
        if status is not None:
            assert "rebuild-manifest" in stderr, stderr[-3000:]
            refused += 1
        time.sleep(1.0)  # a manifest moved aside is named by the second
    started = time.monotonic()
    result = plateau_command("rebuild-manifest", "--config", str(config), "--yes")
    assert result.returncode == 0, result.stderr[-3000:]
    recover_s = time.monotonic() - started
    with Store.open(data_dir):
        pass  # opens: the rebuild is finished
    _verify(config)
    reliability.check(
        "kill -9 during rebuild-manifest",
        f"plateau rebuild-manifest killed with SIGKILL {kills} times while it recorded "
        f"{partitions * segments} segment files, plateau serve started after each kill; then "
        "rebuild-manifest run to its end",
        data_dir,
        "events",
        {p: range(end) for p, end in ends.items()},
        recover_s=recover_s,
        kills=kills,
        serve_refused_after_kill=refused,
    )
