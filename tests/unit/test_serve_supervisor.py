"""serve's supervision of worker processes, with stand-ins for the workers (no Kafka)."""

from __future__ import annotations

import json
import multiprocessing
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from bridge import serve as serve_module
from bridge.config import Config, parse_config
from bridge.ops.metrics import ServeCounters


def _worker_stand_in(
    config: Config, name: str, run: str, log_level: str, log_format: str, *, told: Connection
) -> None:
    """worker-0 stops when told; worker-1 is stuck (a seal that never returns)."""
    del config, run, log_level, log_format
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    told.recv()
    while name == "worker-1":
        time.sleep(60)
    raise SystemExit(0)


def test_a_worker_killed_at_the_shutdown_deadline_makes_serve_exit_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = parse_config(
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:1", "group_id": "g"},
            "storage": {"data_dir": str(tmp_path)},
            "topics": [{"source": "t"}],
            "shutdown_timeout": "0.1s",
        }
    )
    monkeypatch.setattr(serve_module, "_child", _worker_stand_in)
    stop = threading.Event()
    stop.set()
    code = serve_module._supervise(config, 2, stop, "serve-test-0", ServeCounters())
    assert code == serve_module.EXIT_ERROR


def test_a_worker_kafka_did_not_answer_at_its_stop_counts_below_one_that_failed() -> None:
    """It stopped with everything in the store; a worker that was killed or stopped on a
    poison record says more, and a clean stop less."""
    unanswered = serve_module.EXIT_KAFKA_UNANSWERED
    assert serve_module.worst_exit([0, unanswered]) == unanswered
    assert serve_module.worst_exit([unanswered, serve_module.EXIT_ERROR]) == serve_module.EXIT_ERROR
    assert (
        serve_module.worst_exit([serve_module.EXIT_POISON, unanswered]) == serve_module.EXIT_POISON
    )
    assert serve_module.worst_exit([]) == 0


def test_the_kafka_api_listener_drains_beside_the_workers_not_after_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker still draining when the stop comes must not hold the listener's own drain
    back: one after the other, serve's shutdown took up to twice shutdown_timeout."""
    config = parse_config(
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:1", "group_id": "g"},
            "storage": {"data_dir": str(tmp_path)},
            "topics": [{"source": "t"}, {"name": "produced", "partitions": 1}],
            "kafka_api": {"listen": "127.0.0.1:0"},
            "metrics": {"enabled": False},
        }
    )
    listeners: list[threading.Thread] = []
    seen: dict[str, bool] = {}

    def draining_worker(
        config: Config, store: object, stop: threading.Event, name: str, run: str | None = None
    ) -> int:
        (thread,) = (t for t in threading.enumerate() if t.name == "kafka-api")
        listeners.append(thread)
        stop.wait(30)
        # A worker whose seals take a while: the listener stops meanwhile.
        thread.join(30)
        seen["listener_stopped_while_the_worker_drained"] = not thread.is_alive()
        return 0

    monkeypatch.setattr(serve_module, "run_worker", draining_worker)
    stop = threading.Event()
    done: list[int] = []
    server = threading.Thread(target=lambda: done.append(serve_module.serve(config, 1, stop)))
    server.start()
    deadline = time.monotonic() + 30
    while not listeners and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listeners, "serve did not start its worker"
    stop.set()
    server.join(60)
    assert not server.is_alive()
    assert done == [0]
    assert seen == {"listener_stopped_while_the_worker_drained": True}


_SIGNALS_AFTER_A_STOP_BY_PIPE = """
import os, signal, sys, threading
from bridge.serve import install_stop_handlers
stop = threading.Event()
install_stop_handlers(stop)
stop.set()  # what a worker's stop-word thread does when serve says stop over the pipe
os.kill(os.getpid(), signal.SIGTERM)  # the group's signal, handled after that
print("still draining", flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # a second signal
print("not reached", flush=True)
"""


def test_a_signal_after_a_stop_told_over_the_pipe_is_the_first_one() -> None:
    """A worker told to stop over its pipe can run the handler of the signal sent to the
    whole group later: that signal is the first one and must not exit at once; a second
    one does."""
    done = subprocess.run(
        [sys.executable, "-c", _SIGNALS_AFTER_A_STOP_BY_PIPE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    printed = [line for line in done.stdout.splitlines() if "draining" in line or "reached" in line]
    assert printed == ["still draining"]
    assert done.returncode == 130
    assert "exit_now" in done.stdout + done.stderr


def test_a_worker_that_fails_logs_one_event_and_exits_as_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker process's unexpected error was multiprocessing's traceback on stderr, lines
    that are not JSON in serve's JSON log; it is now one `worker_failed` event, and the exit
    code is still a crash's (serve restarts the worker)."""
    config = parse_config(
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:1", "group_id": "g"},
            "storage": {"data_dir": str(tmp_path)},
            "topics": [{"source": "t"}],
        }
    )

    def failing(*_args: object) -> int:
        raise RuntimeError("dead letters to 'missing' failed")

    monkeypatch.setattr(serve_module, "run_worker", failing)
    monkeypatch.setattr(serve_module, "install_stop_handlers", lambda _stop: None)
    ours, theirs = multiprocessing.Pipe()
    with pytest.raises(SystemExit) as ended:
        serve_module._child(config, "worker-0", "run", "INFO", "json", told=theirs)
    ours.close()
    assert ended.value.code == serve_module.EXIT_ERROR
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is a JSON event
    failed = [e for e in events if e["event"] == "worker_failed"]
    assert len(failed) == 1
    assert failed[0]["error_type"] == "RuntimeError"
    assert "missing" in failed[0]["error"]
    assert "Traceback" in failed[0]["exception"]
