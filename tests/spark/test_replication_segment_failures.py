"""A segment the replication cannot read holds back its topic, not the run: the connector
refusing a corrupt batch fails that topic's Spark job, Spark still answers, and the other
topics are replicated. Spark that is gone (stopped, its JVM halted) or does not run the
probe's job in time still ends the run."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from contextlib import suppress
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from structlog.testing import capture_logs

from plateau_core import SegmentState, Store
from plateau_core.verify import verify_store
from plateau_spark.errors import TopicReplicationError
from plateau_spark.replication import Replicator, Target
from plateau_spark.replication.spark_probe import spark_answers
from tests.bridge_support import REPO
from tests.spark.conftest import write_segments
from tests.spark.iceberg_support import replicator, table_keys
from tests.spark.test_replica_widening import replica_rows
from tests.support import batch


def _two_topics(store: Store) -> None:
    """Topics `a` (sorted first, so a run that ends there never reaches `b`) and `b`, each
    two 3-row segments of partition 0; the first batch of a's first segment corrupt."""
    for topic in ("a", "b"):
        write_segments(store, topic, 0, [batch(range(3)), batch(range(3, 6))], roll_rows=3)
    victim = store.manifest.segments("a")[0]
    assert victim.checksums is not None and victim.start_offset == 0
    position, length, _ = victim.checksums.batches[0]
    path = store.segment_path(victim)
    raw = bytearray(path.read_bytes())
    raw[position + length // 2] ^= 0xFF  # inside the batch: its checksum no longer matches
    path.write_bytes(bytes(raw))


def _states(store: Store, topic: str) -> list[SegmentState]:
    return [s.state for s in store.manifest.segments(topic)]


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_a_corrupt_segment_holds_back_its_topic_and_the_others_replicate(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    """Spark's job for the topic failed, and a failed Spark job ended the whole run: every
    topic after it waited, run after run, until the segment was dealt with. Iceberg tables
    are written in this process, without Spark: its reader's error held the topic back
    already, and is checked to go on doing so."""
    store = Store.open(tmp_path / "data")
    _two_topics(store)
    target = Target.parse(str(tmp_path / "target"))
    iceberg = replicator(store, target)
    job = Replicator(store, target) if kind == "parquet" else iceberg
    event = "replication_topic_failed" if kind == "parquet" else "iceberg_topic_failed"
    with (
        capture_logs() as logs,
        pytest.raises(TopicReplicationError, match=r"topic 'a'.*corrupt") as raised,
    ):
        job.run_once(spark)
    assert set(raised.value.failed) == {"a"}
    assert "record batch 0" in raised.value.failed["a"]
    assert "\tat " not in raised.value.failed["a"]  # the cause, without the JVM's trace
    assert [e["topic"] for e in logs if e["event"] == event] == ["a"]
    assert _states(store, "a") == [SegmentState.SEALED] * 2  # nothing of it recorded
    assert _states(store, "b") == [SegmentState.REPLICATED] * 2

    # The operator's check quarantines the segment; the topic's other one replicates.
    checked = verify_store(store, quarantine=True)
    assert [(p.topic, p.start_offset, p.quarantined) for p in checked.problems] == [("a", 0, True)]
    report = job.run_once(spark)
    assert report.rows == 3
    assert _states(store, "a") == [SegmentState.REPLICATED]
    (quarantined,) = store.manifest.segments("a", states=(SegmentState.QUARANTINED,))
    assert quarantined.start_offset == 0
    if kind == "parquet":
        assert sorted(replica_rows(target, "a").column("offset").to_pylist()) == [3, 4, 5]
        assert sorted(replica_rows(target, "b").column("offset").to_pylist()) == list(range(6))
    else:
        assert sorted(table_keys(iceberg.table("a"))) == [(0, o) for o in (3, 4, 5)]
        assert sorted(table_keys(iceberg.table("b"))) == [(0, o) for o in range(6)]
    store.close()


# A run with a Spark session of its own that is gone before it starts: stopped (its job
# fails and so does the probe after it) or its JVM halted (py4j cannot connect).
_SPARK_GONE = """
import sys
from contextlib import suppress
from pathlib import Path
from py4j.protocol import Py4JError
from plateau_core import Store
from plateau_spark.replication import Replicator, Target
from plateau_spark.session import session

data, target, how = sys.argv[1:4]
spark = session("local[1]")
if how == "stopped":
    spark.stop()
else:
    with suppress(Py4JError, OSError):  # the call's answer is lost with the JVM
        spark._jvm.java.lang.Runtime.getRuntime().halt(1)
try:
    Replicator(Store.open(Path(data)), Target.parse(target)).run_once(spark)
except Exception as exc:
    print("raised", type(exc).__name__)
"""


@pytest.mark.parametrize("how", ["stopped", "halted"])
def test_spark_that_is_gone_ends_the_run(tmp_path: Path, how: str) -> None:
    """Held back like a topic's own failure, every topic would have failed alike, each
    reported as if its data were the trouble."""
    store = Store.open(tmp_path / "data")
    _two_topics(store)
    done = subprocess.run(
        [sys.executable, "-c", _SPARK_GONE, str(tmp_path / "data"), str(tmp_path / "replica"), how],
        cwd=REPO,
        timeout=300,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (raised,) = [line for line in done.stdout.splitlines() if line.startswith("raised ")]
    assert raised in ("raised Py4JJavaError", "raised ConnectionRefusedError"), raised
    assert "replication_topic_failed" not in done.stdout
    if how == "stopped":
        # Its job failed, and the probe found Spark gone (a halted JVM fails to connect, an
        # OSError, before any job).
        assert "spark_probe_failed" in done.stdout
    assert _states(store, "a") == _states(store, "b") == [SegmentState.SEALED] * 2
    store.close()


def test_a_probe_spark_cannot_run_in_time_is_no_answer(spark: SparkSession) -> None:
    """Both of the session's task slots taken: the probe's job waits, and after its timeout
    Spark is taken to be away (a cluster without executors), the job cancelled."""
    blocker = f"blocker-{uuid.uuid4().hex}"
    started = threading.Event()

    def occupy() -> None:
        spark.sparkContext.setJobGroup(blocker, "holds both task slots", interruptOnCancel=True)
        started.set()
        with suppress(Exception):  # cancelled below
            spark.sparkContext.parallelize(range(2), 2).foreach(lambda _: time.sleep(30))

    thread = threading.Thread(target=occupy, daemon=True)
    thread.start()
    try:
        assert started.wait(30)
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + 30
        while not tracker.getJobIdsForGroup(blocker) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1)  # its tasks started
        with capture_logs() as logs:
            began = time.monotonic()
            assert not spark_answers(spark, "t", timeout_s=2)
            assert time.monotonic() - began < 10
        (failed,) = [e for e in logs if e["event"] == "spark_probe_failed"]
        assert failed["topic"] == "t" and "no answer within 2 s" in failed["error"]
        # The probe's waiting job is cancelled: only the blocker's is left.
        blocking = set(tracker.getJobIdsForGroup(blocker))
        deadline = time.monotonic() + 10
        while set(tracker.getActiveJobsIds()) - blocking and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(tracker.getActiveJobsIds()) == blocking
    finally:
        spark.sparkContext.cancelJobGroup(blocker)
        thread.join(60)
    assert not thread.is_alive()
    assert spark_answers(spark, "t")  # free again
