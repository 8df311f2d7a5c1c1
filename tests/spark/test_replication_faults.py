"""Object storage goes away in the middle of replication: the run fails and says so,
nothing is recorded as replicated, retention that requires replication keeps every segment,
and the next run once storage is back leaves each record in the bucket exactly once."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from plateau_core import RetentionPolicy, SegmentState, Store, StoreLimits
from plateau_core.retention import Retention
from plateau_spark.replication import Replicator, TargetError
from tests.reliability.support import Audit, Recorder
from tests.spark.conftest import minute_batches, s3_bucket_target, write_segments
from tests.spark.test_replication import s3_keys
from tests.support import batch

pytestmark = pytest.mark.reliability


class Outage:
    """A TCP relay in front of the S3 server that the test takes down and brings back:
    while down, open connections are cut and new ones are closed at once."""

    def __init__(self, upstream: str) -> None:
        parsed = urlparse(upstream)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._up = threading.Event()
        self._up.set()
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._budget: int | None = None  # bytes towards S3 before the cut, None: no cut
        threading.Thread(target=self._accept, name="s3-relay", daemon=True).start()

    def down(self) -> None:
        self._up.clear()
        with self._lock:
            for conn in self._open:
                conn.close()
            self._open.clear()

    def up(self) -> None:
        self._budget = None
        self._up.set()

    def cut_after(self, nbytes: int) -> None:
        """Go down once `nbytes` more have been sent towards S3 (mid-upload)."""
        self._budget = nbytes

    def _spend(self, nbytes: int) -> None:
        if self._budget is None:
            return
        self._budget -= nbytes
        if self._budget <= 0:
            self.down()

    def close(self) -> None:
        self.down()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._up.is_set():
                client.close()
                continue
            server = socket.create_connection(self._upstream)
            with self._lock:
                self._open += [client, server]
            for source, sink, spend in ((client, server, self._spend), (server, client, None)):
                threading.Thread(target=_pipe, args=(source, sink, spend), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket, spend: Callable[[int], None] | None) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
            if spend is not None:
                spend(len(chunk))
    except OSError:
        pass
    finally:
        for end in (source, sink):
            end.close()


@pytest.fixture
def outage(s3_endpoint: str) -> Iterator[Outage]:
    relay = Outage(s3_endpoint)
    try:
        yield relay
    finally:
        relay.close()


def test_object_storage_outage_mid_replication(
    spark: SparkSession,
    tmp_path: Path,
    s3_endpoint: str,
    outage: Outage,
    reliability: Recorder,
) -> None:
    store = Store.open(tmp_path / "data")
    for partition in (0, 1):
        write_segments(store, "t", partition, minute_batches(partition, 4), roll_rows=100)
    target = s3_bucket_target(s3_endpoint, reach_at=outage.endpoint)
    replicator = Replicator(store, target)
    assert replicator.run_once(spark).segments == 8

    for partition in (0, 1):
        more = [batch(range(start, start + 100)) for start in range(400, 1000, 100)]
        write_segments(store, "t", partition, more, roll_rows=100)
    # The upload starts, then storage goes away under it: connections cut, new ones refused.
    outage.cut_after(10_000)  # past the store-id marker, the staging sweep, the types record
    with pytest.raises((PySparkException, TargetError), match=r"NETWORK_CONNECTION|Connection re"):
        replicator.run_once(spark)
    replicated = store.manifest.segments("t", states=(SegmentState.REPLICATED,))
    assert len(replicated) == 8, "a segment was recorded as replicated during the outage"
    # Retention that requires replication may not take what the bucket does not have.
    retention = Retention(
        store,
        default=RetentionPolicy(max_segments=2, require_replicated=True),
        limits=StoreLimits(deletion_grace_s=0),
    )
    retention.run()
    left = store.manifest.segments("t", states=(SegmentState.SEALED,))
    assert len(left) == 12 and retention.forced_total == 0

    outage.up()
    back_at = time.monotonic()
    second = replicator.run_once(spark)
    recover_s = time.monotonic() - back_at
    assert second.segments == 12
    # Every record ever written: those retention removed after the first run included.
    expected = {(p, o) for p in (0, 1) for o in range(1000)}
    in_bucket = s3_keys(target)
    store.close()
    result = Audit(
        produced=2000,
        expected=len(expected),
        landed=sum(n for key, n in in_bucket.items() if key in expected),
        lost=len(expected - in_bucket.keys()),
        duplicated=sum(n - 1 for n in in_bucket.values() if n > 1),
        unexpected=sum(n for key, n in in_bucket.items() if key not in expected),
    )
    reliability.record(
        "Object storage down mid-replication",
        "S3 connections cut mid-upload (10 kB into a replicate run's requests) and refused after; "
        "retention requiring replication ran meanwhile; S3 back, replicate again "
        "(records counted in the bucket)",
        result,
        recover_s=recover_s,
        kept_unreplicated=len(left),
    )
    assert result.exact, result
