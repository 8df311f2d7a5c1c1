"""`plateau replicate` killed with SIGKILL at random points of its runs, to Parquet files and
to an Iceberg table on the S3-compatible test server, with segments sealed between the runs:
the run let finish leaves every stored record in the replica exactly once, every segment
recorded replicated, and `plateau verify` passing."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from pyarrow import fs

from plateau_core import SegmentState, Store
from plateau_spark.replication import Target
from plateau_spark.replication.iceberg_commit import committed_offsets
from tests.bridge_support import REPO, plateau_command
from tests.reliability.support import FULL, Audit, Recorder, scale
from tests.spark.conftest import s3_bucket_target, write_segments
from tests.spark.iceberg_support import replicator, table_keys
from tests.spark.test_replication import s3_keys, stored_keys
from tests.support import BASE_MS, batch

pytestmark = pytest.mark.reliability

ROWS = 200  # per segment
PER_RUN = 15  # segments sealed per partition before each run

# The replication job of `plateau replicate` for a Parquet target, without Spark.
_WITHOUT_SPARK = """
import sys
import time
from bridge.config import load_config
from plateau_core import Store
from plateau_spark.replication import Replicator, Target

config = load_config(sys.argv[sys.argv.index("-c", 1) + 1])
replication = config.replication
assert replication.target is not None
target = Target.parse(replication.target, replication.s3.settings())
with Store.open(config.storage.data_dir) as store:
    job = Replicator(store, target, file_bytes=int(replication.file_size))
    job.run_once()
    if "--once" not in sys.argv:
        time.sleep(3600)
"""


def _seal(store: Store, segments: int) -> None:
    """`segments` more segments in each of partitions 0 and 1, a minute apart."""
    for partition in (0, 1):
        start = store.manifest.watermark("t", partition) or 0
        batches = []
        for first in range(start, start + segments * ROWS, ROWS):
            offsets = range(first, first + ROWS)
            times = [BASE_MS + (o // ROWS) * 60_000 + partition for o in offsets]
            batches.append(batch(offsets, times=times, value_size=64))
        write_segments(store, "t", partition, batches, roll_rows=ROWS)


def _config(tmp_path: Path, target: Target, endpoint: str, kind: str) -> Path:
    replication: dict[str, object] = {
        "target": target.uri,
        "format": kind,
        "file_size": 1,  # a file per segment: a run is many uploads
        "s3": {
            "endpoint_url": endpoint,
            "region": "us-east-1",
            "access_key_id": "k",
            "secret_access_key": "s",
        },
    }
    path = tmp_path / "plateau.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "storage": {"data_dir": str(tmp_path / "data")},
                "topics": [{"source": "t"}],
                "replication": replication,
            }
        )
    )
    return path


def _sealed(store: Store) -> int:
    return len(store.manifest.segments("t", states=(SegmentState.SEALED,)))


def _objects(target: Target) -> int:
    selector = fs.FileSelector(target.root, recursive=True, allow_not_found=True)
    return sum(1 for info in target.filesystem().get_file_info(selector) if info.is_file)


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_kill_9_during_replication(
    tmp_path: Path, s3_endpoint: str, reliability: Recorder, kind: str
) -> None:
    rng = random.Random(int(os.environ.get("PLATEAU_CRASH_SEED", "29")))
    target = s3_bucket_target(s3_endpoint)
    config = _config(tmp_path, target, s3_endpoint, kind)
    # Parquet replicas are written by Spark from `plateau replicate`; a Spark driver takes
    # tens of seconds to start here, so the short form writes the same files the same way
    # without Spark (the job's order of delete, write, record is the same).
    spark = FULL or kind == "iceberg"
    cli = [sys.executable, "-m", "bridge.cli", "--log-level", "WARNING", "replicate"]
    command = cli if spark else [sys.executable, "-c", _WITHOUT_SPARK]
    kills = scale(4, 6 if kind == "parquet" else 10)  # a Spark driver starts per run
    recorded: list[int] = []  # segments each killed run recorded replicated
    store = Store.open(tmp_path / "data")
    try:
        for _ in range(kills):
            _seal(store, PER_RUN)
            pending = _sealed(store)
            before = _objects(target)
            # Its own process group: the Spark driver's JVM dies with it.
            process = subprocess.Popen(
                [*command, "-c", str(config), "--interval", "1h"],
                env=os.environ | {"PYTHONPATH": str(REPO)},
                cwd=REPO,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                deadline = time.monotonic() + 120
                while _objects(target) == before:
                    assert process.poll() is None, process.communicate()[1][-3000:]
                    assert time.monotonic() < deadline, "replicate wrote nothing within 120 s"
                    time.sleep(0.01)
                time.sleep(rng.uniform(0.0, 2.0))
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
            recorded.append(pending - _sealed(store))
        _seal(store, 5)
        started = time.monotonic()
        done = subprocess.run(
            [*command, "-c", str(config), "--once"],
            cwd=REPO,
            env=os.environ | {"PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        recover_s = time.monotonic() - started
        expected = stored_keys(store)
        if kind == "iceberg":
            table = replicator(store, target).table("t")
            replica = table_keys(table)
            assert committed_offsets(table) == {p: store.manifest.watermark("t", p) for p in (0, 1)}
        else:
            replica = s3_keys(target)
        left = store.manifest.segments("t", states=(SegmentState.SEALED,))
    finally:
        store.close()
    verify = plateau_command("verify", "-c", str(config))
    assert verify.returncode == 0, verify.stdout[-3000:]
    result = _compare(expected, replica)
    reliability.record(
        f"kill -9 during replication to {'Parquet' if kind == 'parquet' else 'Iceberg'} on S3",
        f"plateau replicate ({kind}, to the S3-compatible test server"
        + ("" if spark else "; written without Spark")
        + ") killed with SIGKILL "
        f"{kills} times at random points after its first upload, {2 * PER_RUN} segments sealed "
        "before each run; then one run to its end",
        result,
        recover_s=recover_s,
        kills=kills,
        segments_recorded_by_each_killed_run=recorded,
        segments_left_sealed=len(left),
    )
    assert result.exact, result
    assert left == [], "segments the last run did not record as replicated"


def _compare(expected: Counter[tuple[int, int]], replica: Counter[tuple[int, int]]) -> Audit:
    lost = sorted(set(expected) - set(replica))
    return Audit(
        produced=sum(expected.values()),
        expected=len(expected),
        landed=sum(1 for key in expected if key in replica),
        lost=len(lost),
        duplicated=sum(n - 1 for n in replica.values() if n > 1),
        unexpected=sum(n for key, n in replica.items() if key not in expected),
        missing_sample=lost[:10],
    )
