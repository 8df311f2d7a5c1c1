"""Readiness and the stall detector, driven by worker status files and a test clock."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from bridge.errors import BridgeError
from bridge.ops.endpoint import MetricsEndpoint
from bridge.ops.monitor import Monitor
from bridge.ops.worker_status import StatusFile, new_run_id, read_run, remove_run, remove_stale


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def partition(**overrides: Any) -> dict[str, Any]:
    return {
        "source": "events",
        "topic": "events",
        "partition": 0,
        "next_offset": 100,
        "watermark": 100,
        "end_offset": 100,
        "paused": None,
        "unsealed_age_s": None,
        "max_age_s": 10.0,
        **overrides,
    }


class Fixture:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = Clock()
        self.run = new_run_id()
        self.data_dir = tmp_path
        self.monitor = Monitor(
            tmp_path, self.run, stall_after_s=30.0, clock=self.clock, wall_clock=self.clock
        )

    def report(self, *parts: dict[str, Any], worker: str = "worker-0", **extra: Any) -> None:
        status = StatusFile(self.data_dir, worker, self.run)
        body = {"worker": worker, "partitions": list(parts), **extra}
        status.write(body)
        # The file's time is the test clock's, as a worker writing now would stamp it.
        document = json.loads(status.path.read_text())
        document["updated_at"] = self.clock.now
        status.path.write_text(json.dumps(document))


@pytest.fixture
def fx(tmp_path: Path) -> Fixture:
    return Fixture(tmp_path)


def test_not_ready_until_a_worker_reports_with_partitions(fx: Fixture) -> None:
    assert fx.monitor.check().reasons == ("no worker is running",)
    fx.report()
    assert fx.monitor.check().reasons == ("no partition assigned",)
    fx.report(partition())
    readiness = fx.monitor.check()
    assert (readiness.ready, readiness.workers, readiness.assigned) == (True, 1, 1)


def test_records_waiting_without_progress_stall_and_progress_clears_it(fx: Fixture) -> None:
    fx.report(partition(next_offset=100, end_offset=500, paused="memory_budget"))
    with capture_logs() as logs:
        assert fx.monitor.check().ready
        fx.clock.now += 29
        fx.report(partition(next_offset=100, end_offset=500, paused="memory_budget"))
        assert fx.monitor.check().ready  # not yet stall_after
        fx.clock.now += 2
        fx.report(partition(next_offset=100, end_offset=500, paused="memory_budget"))
        red = fx.monitor.check()
        fx.clock.now += 5
        fx.report(partition(next_offset=100, end_offset=500, paused="memory_budget"))
        assert not fx.monitor.check().ready  # still stalled, logged once
        fx.report(partition(next_offset=150, end_offset=500))
        green = fx.monitor.check()
    assert not red.ready
    assert [s.describe() for s in red.stalled] == [
        "events[0] on worker-0: 400 records waiting in Kafka and no progress for 31s, "
        "paused (memory_budget)"
    ]
    assert green.ready
    events = [(e["event"], e["log_level"], e["topic"], e["partition"]) for e in logs]
    assert events == [
        ("partition_stalled", "error", "events", 0),
        ("partition_progressing", "info", "events", 0),
    ]


def test_an_idle_partition_is_not_stalled(fx: Fixture) -> None:
    fx.report(partition(next_offset=100, end_offset=100, watermark=100))
    fx.monitor.check()
    fx.clock.now += 3600
    fx.report(partition(next_offset=100, end_offset=100, watermark=100))
    assert fx.monitor.check().ready


def test_unsealed_records_past_max_age_plus_stall_after_stall(fx: Fixture) -> None:
    # Consumed up to the end, but the seal does not finish (a writer that blocks).
    fx.report(partition(next_offset=500, end_offset=500, watermark=100, unsealed_age_s=39.0))
    assert fx.monitor.check().ready  # 29 s past max_age: within stall_after
    fx.report(partition(next_offset=500, end_offset=500, watermark=100, unsealed_age_s=41.0))
    readiness = fx.monitor.check()
    assert not readiness.ready
    assert "31s past the roll max_age" in readiness.stalled[0].reason


def test_a_silent_worker_and_an_unreachable_kafka_are_not_ready(fx: Fixture) -> None:
    fx.report(partition())
    fx.clock.now += 31
    assert fx.monitor.check().reasons == ("worker-0 has not reported for 31s",)
    fx.report(partition(), kafka_down="all brokers down (127.0.0.1:1)")
    assert fx.monitor.check().reasons == ("worker-0: all brokers down (127.0.0.1:1)",)


def test_a_dead_or_stopped_worker_does_not_count_but_its_file_stays_for_the_run(
    fx: Fixture,
) -> None:
    fx.report(partition(), worker="worker-0", stopped=True)
    fx.report(partition(partition=1), worker="worker-1")
    readiness = fx.monitor.check()
    assert (readiness.workers, readiness.assigned) == (1, 1)
    assert sorted((w["worker"], w["alive"]) for w in read_run(fx.data_dir, fx.run)) == [
        ("worker-0", False),
        ("worker-1", True),
    ]
    remove_run(fx.data_dir, fx.run)
    assert read_run(fx.data_dir, fx.run) == []


def test_files_of_crashed_serve_runs_are_removed_at_start(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # No process has pid 2**22 + 1 (above Linux's pid_max): its run is gone.
    dead = run_dir / f"serve-{2**22 + 1}-0.worker-0.json"
    legacy = run_dir / "worker-0.json"
    # A run under this process's pid that this process did not start: in a container, serve
    # is process 1 after every restart, so the crashed one had the same pid.
    before_restart = run_dir / f"serve-{os.getpid()}-0-0badc0de.worker-0.json"
    older_version = run_dir / f"serve-{os.getpid()}-99.worker-0.json"  # ids without a random part
    run = new_run_id()
    mine = run_dir / f"{run}.worker-0.json"
    for path in (dead, legacy, before_restart, older_version, mine):
        path.write_text("{}")
    try:
        remove_stale(tmp_path)
        assert sorted(p.name for p in run_dir.iterdir()) == [mine.name]
    finally:
        remove_run(tmp_path, run)


def test_the_endpoint_answers_health_readiness_and_unknown_paths(fx: Fixture) -> None:
    endpoint = MetricsEndpoint("127.0.0.1", 0, CollectorRegistry(), fx.monitor)
    endpoint.start()
    try:
        host, port = endpoint.address

        def get(path: str) -> tuple[int, bytes]:
            try:
                with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as answer:
                    return answer.status, answer.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()

        assert get("/healthz") == (200, b"ok\n")
        fx.monitor.check()
        status, body = get("/readyz")
        assert (status, json.loads(body)["reasons"]) == (503, ["no worker is running"])
        fx.report(partition())
        fx.monitor.check()
        assert get("/readyz")[0] == 200
        assert get("/metrics")[0] == 200
        assert get("/other")[0] == 404
        # A second endpoint on the same address is refused with the key to change.
        with pytest.raises(BridgeError, match=f"metrics.listen 127.0.0.1:{port}"):
            MetricsEndpoint("127.0.0.1", port, CollectorRegistry(), fx.monitor)
    finally:
        endpoint.stop()


def test_a_listener_whose_journal_failed_is_not_ready(fx: Fixture) -> None:
    """Produce is refused until a restart: /readyz says so, and why."""
    listener = {"journal": {"failed": True, "last_error": "RuntimeError: encoding fault"}}
    fx.report(worker="kafka-api", role="kafka-api", **{"kafka-api": listener})
    assert fx.monitor.check().reasons == (
        "kafka-api: the journal failed (RuntimeError: encoding fault); produce is refused "
        "until a restart",
    )
    listener["journal"] = {"failed": False, "last_error": None}
    fx.report(worker="kafka-api", role="kafka-api", **{"kafka-api": listener})
    assert fx.monitor.check().ready
