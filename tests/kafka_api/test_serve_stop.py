"""serve's exit status when the Kafka API's stop fails: its final seals fail, or it does not
stop in time. The records stay in the journal for the next start either way; the status
tells a supervisor that this stop was not a clean one."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.config import parse_config
from bridge.kafka_api.sink import ProduceSink
from bridge.local_kafka import free_port
from tests.bridge_support import REPO, serve_process, serve_stopped_at_once
from tests.reliability.test_produce_crashes import wait_listening


def _serve_stopped_at_once(data_dir: Path, timeout: str = "20s") -> tuple[int, list[Any]]:
    """serve with a produce-only config, told to stop as it starts; its code and logs."""
    config = parse_config(
        {
            "storage": {"data_dir": str(data_dir)},
            "kafka_api": {"listen": "127.0.0.1:0"},
            "topics": [{"name": "events", "partitions": 2}],
            "metrics": {"enabled": False},
            "shutdown_timeout": timeout,
        }
    )
    return serve_stopped_at_once(config)


def test_a_clean_stop_exits_0(tmp_path: Path) -> None:
    code, logs = _serve_stopped_at_once(tmp_path / "data")
    assert code == 0
    assert not [e for e in logs if e["event"] == "serve_stopped_with_failure"]


def test_final_seals_that_fail_make_serve_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_close(self: ProduceSink, timeout_s: float) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(ProduceSink, "close", failing_close)
    code, logs = _serve_stopped_at_once(tmp_path / "data")
    assert code == 1
    failed = [e for e in logs if e["event"] == "kafka_api_failed"]
    assert len(failed) == 1 and "Input/output error" in failed[0]["error"]
    said = [e for e in logs if e["event"] == "serve_stopped_with_failure"]
    assert len(said) == 1 and said[0]["part"] == "kafka_api"
    assert "Input/output error" in said[0]["error"]


def test_a_listener_that_does_not_stop_in_time_makes_serve_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    closing = ProduceSink.close

    def hanging_close(self: ProduceSink, timeout_s: float) -> None:
        release.wait(30)
        closing(self, timeout_s)

    monkeypatch.setattr(ProduceSink, "close", hanging_close)
    started = time.monotonic()
    try:
        # shutdown_timeout 1 s: serve gives the listener 1 s and 5 more, then goes on.
        code, logs = _serve_stopped_at_once(tmp_path / "data", timeout="1s")
    finally:
        release.set()
    assert code == 1
    assert 5 <= time.monotonic() - started < 30
    timed_out = [e for e in logs if e["event"] == "kafka_api_stop_timed_out"]
    assert len(timed_out) == 1 and timed_out[0]["timeout_s"] == 6
    said = [e for e in logs if e["event"] == "serve_stopped_with_failure"]
    assert len(said) == 1 and "did not stop within 6 s" in said[0]["error"]


def _config_file(tmp_path: Path, **extra: object) -> tuple[Path, int]:
    """A produce-only config for serve as a process of its own, and its listener's port."""
    port = free_port()
    config = tmp_path / "plateau.yaml"
    body = {
        "storage": {"data_dir": str(tmp_path / "data")},
        "kafka_api": {"listen": f"127.0.0.1:{port}"},
        "topics": [{"name": "events", "partitions": 2}],
        "metrics": {"enabled": False},
        **extra,
    }
    config.write_text(yaml.safe_dump(body))
    return config, port


def test_sigusr1_writes_every_threads_stack_and_serve_goes_on(tmp_path: Path) -> None:
    config, port = _config_file(tmp_path)
    process = serve_process(config)
    try:
        wait_listening(port)
        # Several, from the moment it listens: serve is still starting threads then, the
        # moment a dump taken without the interpreter lock could crash it.
        for _ in range(5):
            process.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
        wait_listening(port, timeout_s=5)  # still serving
        alive = process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        stderr = process.communicate(timeout=60)[1]
    assert alive and process.returncode == 0, (process.returncode, stderr[-3000:])
    assert stderr.count("Stacks of every thread of process") == 5
    assert 'File "' in stderr and "Thread MainThread" in stderr
    assert "kafka_api/server.py" in stderr  # the listener's thread among them


def test_final_seals_stuck_for_good_do_not_keep_serve_from_exiting(tmp_path: Path) -> None:
    """The listener's stop waits shutdown_timeout and 5 s more; then serve exits 1 and says
    where the stop is stuck, whatever the stuck call does. (Run on asyncio's default pool,
    the stuck call held the process at exit, which joins that pool's threads.)"""
    config, port = _config_file(tmp_path, shutdown_timeout="1s")
    stuck = (
        "import sys, threading\n"
        "from bridge.kafka_api.sink import ProduceSink\n"
        "def stuck_close(self, timeout_s):\n"
        "    threading.Event().wait()\n"
        "ProduceSink.close = stuck_close\n"
        "from bridge.cli import main\n"
        f"sys.exit(main(['serve', '--config', {str(config)!r}]))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", stuck],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_listening(port)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 1, stderr[-3000:]
    assert time.monotonic() - started < 30
    assert "kafka_api_stop_timed_out" in stdout + stderr
    assert "serve_stopped_with_failure" in stdout + stderr
    assert "in stuck_close" in stderr  # the stacks name the call it is stuck in
