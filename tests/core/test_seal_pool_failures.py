"""Faults around a seal that are not the seal's own failure: a seal that gets no thread, a
tick that raises, a journal release that fails after the seal is recorded. Sealing goes
on, and what waits for it is told. Raised, the first failed the append whose records were
already buffered and left them taken and never sealed; the second ended the ticker, and
with it every seal by age and every retry; the third was lost in the pool with the room
the seal had freed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from plateau_core import Append, RollPolicy, Store, WriterPolicy
from plateau_core.listener import NoListener
from tests.support import batch


def offsets(store: Store) -> list[int]:
    return sorted(store.read("t", partitions=[0]).to_table().column("offset").to_pylist())


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_seal_that_gets_no_thread_is_retried_and_its_append_goes_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(fsync=False, retry_backoff_s=0.05, tick_s=0.01))
    writer.acquire("t", 0)
    real = writer._pool.submit
    refusals = [RuntimeError("can't start new thread")]

    def submit(fn: Callable[..., Any], *args: Any) -> Any:
        if refusals:
            raise refusals.pop()
        return real(fn, *args)

    monkeypatch.setattr(writer._pool, "submit", submit)
    with capture_logs() as logs:
        writer.append("t", 0, batch(range(5)), urgent=True)  # starts its seal at once
        assert not refusals
        wait_for(lambda: store.manifest.watermark("t", 0) == 5, "the seal was not retried")
    assert "seal_failed" in [e["event"] for e in logs]
    writer.close()
    assert offsets(store) == [0, 1, 2, 3, 4]
    store.close()


def test_a_tick_that_fails_does_not_end_the_ticker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(fsync=False, tick_s=0.01))
    writer.acquire("t", 0, roll=RollPolicy(max_age_s=0.05))
    real = writer._early
    faults = [RuntimeError("fault in a tick")]

    def early(now: float) -> Any:
        if faults:
            raise faults.pop()
        return real(now)

    with capture_logs() as logs:
        monkeypatch.setattr(writer, "_early", early)
        wait_for(lambda: not faults, "the ticker did not tick")
        writer.append("t", 0, batch(range(5)))
        # Only the ticker seals it: by its age.
        wait_for(lambda: store.manifest.watermark("t", 0) == 5, "nothing sealed it")
    assert "seal_tick_failed" in [e["event"] for e in logs]
    writer.close()
    store.close()


class Capacity(NoListener):
    def __init__(self) -> None:
        self.told = threading.Semaphore(0)

    def on_capacity(self) -> None:
        self.told.release()


def test_a_journal_release_that_fails_after_a_seal_still_frees_its_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path / "data")
    listener = Capacity()
    writer = store.writer(WriterPolicy(fsync=False, tick_s=0.01), listener, journal=True)
    writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
    journal = writer.journal
    assert journal is not None
    real = journal.release
    failures = [OSError(5, "Input/output error")]

    def release(below: int) -> None:
        if failures:
            raise failures.pop()
        real(below)

    monkeypatch.setattr(journal, "release", release)
    with capture_logs() as logs:
        writer.append_group([Append("t", 0, (batch(range(5)),))])
        writer.flush(timeout_s=10)
        assert listener.told.acquire(timeout=10), "the seal's room was not told"
    assert not failures
    assert "seal_aftermath_failed" in [e["event"] for e in logs]
    writer.append_group([Append("t", 0, (batch(range(5, 8)),))])
    writer.flush(timeout_s=10)
    writer.close()
    assert offsets(store) == list(range(8))
    store.close()
