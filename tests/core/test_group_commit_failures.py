"""The manifest-commit thread meeting a fault it does not handle (one that is no Exception,
a thread it cannot start): the seals it holds fail and are retried, and later commits go
on. The thread used to end, or never start, and every seal after it waited for ever."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import plateau_core.group_commit as group_commit
from plateau_core import Store, WriterPolicy
from tests.support import batch


class Interrupted(BaseException):
    """What no `except Exception` takes."""


def sealed_twice(store: Store) -> list[str]:
    """Two appends to t[0], each flushed (10 s at most); the log's events."""
    writer = store.writer(WriterPolicy(fsync=False, retry_backoff_s=0.05))
    writer.acquire("t", 0)
    with capture_logs() as logs:
        writer.append("t", 0, batch(range(5)))
        writer.flush(timeout_s=10)
        writer.append("t", 0, batch(range(5, 8)))
        writer.flush(timeout_s=10)
    # Not in a finally: after a failed flush, a seal waiting for ever would hang the close.
    writer.close()
    assert store.manifest.watermark("t", 0) == 8
    return [e["event"] for e in logs]


def test_a_fault_on_the_commit_thread_fails_the_seal_and_later_commits_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path / "data")
    real = store.manifest.commit_seal
    faults = [Interrupted("fault on the commit thread")]

    def commit_seal(commits: Any) -> Any:
        if faults:
            raise faults.pop()
        return real(commits)

    monkeypatch.setattr(store.manifest, "commit_seal", commit_seal)
    events = sealed_twice(store)
    assert not faults
    assert "group_commit_failed" in events
    assert "seal_failed" in events
    store.close()


def test_a_commit_thread_that_does_not_start_fails_the_seal_and_the_next_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusals = [RuntimeError("can't start new thread")]

    class Thread(threading.Thread):
        def start(self) -> None:
            if self.name == "manifest-commit" and refusals:
                raise refusals.pop()
            super().start()

    monkeypatch.setattr(group_commit.threading, "Thread", Thread)
    store = Store.open(tmp_path / "data")
    events = sealed_twice(store)
    assert not refusals
    assert "seal_failed" in events
    store.close()
