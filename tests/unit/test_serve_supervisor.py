"""serve's supervision of worker processes, with stand-ins for the workers (no Kafka)."""

from __future__ import annotations

import signal
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
