"""The seals' thread pool: bounded, its calls run after a shutdown that waits, and a call
that never returns does not keep the process from exiting."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from plateau_core.daemon_pool import DaemonPool
from tests.bridge_support import REPO


def test_calls_run_on_at_most_the_pools_threads_and_shutdown_waits_for_them() -> None:
    pool = DaemonPool(2, "seal")
    ran: list[int] = []
    names: set[str] = set()
    gate = threading.Event()

    def call(i: int) -> None:
        gate.wait(5)
        names.add(threading.current_thread().name)
        ran.append(i)

    for i in range(20):
        pool.submit(call, i)
    gate.set()
    pool.shutdown(wait=True)
    assert sorted(ran) == list(range(20))
    assert names <= {"seal_0", "seal_1"} and names
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(call, 99)


def test_a_call_that_raises_leaves_its_thread_to_the_next_calls() -> None:
    pool = DaemonPool(1, "seal")
    ran: list[int] = []

    def fails() -> None:
        raise OSError(5, "Input/output error")

    pool.submit(fails)
    pool.submit(ran.append, 1)
    pool.shutdown(wait=True)
    assert ran == [1]


def test_a_call_refused_for_want_of_a_thread_is_not_run_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The writer keeps a refused seal's jobs and submits them again: had the refused call
    stayed queued, the next thread would have sealed those records a second time."""
    pool = DaemonPool(2, "seal")
    ran: list[int] = []

    def no_thread(_thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", no_thread)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            pool.submit(ran.append, 1)
    pool.submit(ran.append, 2)
    pool.shutdown(wait=True)
    assert ran == [2]


def test_a_pool_of_no_threads_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        DaemonPool(0, "seal")


def test_a_call_that_never_returns_does_not_hold_the_exit() -> None:
    # A ThreadPoolExecutor's threads are joined at exit: this process never ended.
    stuck = (
        "import threading\n"
        "from plateau_core.daemon_pool import DaemonPool\n"
        "pool = DaemonPool(1, 'seal')\n"
        "pool.submit(threading.Event().wait)\n"
        "print('submitted', flush=True)\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", stuck],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "submitted\n"
    assert time.monotonic() - started < 30
