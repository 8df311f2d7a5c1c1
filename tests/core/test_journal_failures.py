"""The journal's thread failing on something it does not retry (encoding a group, a fault
after a write or a sync): the groups not durable fail together and the owner hears so at
once, what was written of them is taken back out of the files, later appends are refused,
and a restart replays exactly the groups that were reported durable. The thread used to
end silently, and everyone waiting on it waited for ever."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import plateau_core.journal as journal_module
from plateau_core import Append, RollPolicy, Store, WriterPolicy
from plateau_core.errors import JournalFailedError
from plateau_core.journal import Journal
from plateau_core.journal_files import JOURNAL_DIR
from plateau_core.journal_replay import replay
from plateau_core.listener import NoListener
from tests.core.test_journal import files, group, prepared, write
from tests.support import batch

STEPS = ["encode", "write", "sync"]


def fail_at(step: str, journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, the journal's next round fails at `step`: encoding its groups, after
    writing them (before the sync), or after syncing them (before they are reported)."""
    if step == "encode":

        def encode(*args: Any) -> Any:
            raise RuntimeError("encoding fault")

        monkeypatch.setattr(journal_module, "encode_group", encode)
    elif step == "write":
        real_write = journal_module.write_all

        def write_all(fd: int, chunks: Sequence[Any]) -> None:
            real_write(fd, chunks)
            if len(chunks) > 1:  # a round's groups, not a new file's magic
                raise ValueError("fault after the write")

        monkeypatch.setattr(journal_module, "write_all", write_all)
    else:
        real_flush = journal._flush

        def flush(chunks: list[Any]) -> None:
            real_flush(chunks)
            raise AssertionError("fault after the sync")

        monkeypatch.setattr(journal, "_flush", flush)


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


@pytest.mark.parametrize("file_bytes", [1 << 20, 1], ids=["one-file", "file-per-round"])
@pytest.mark.parametrize("step", STEPS)
def test_a_failed_round_fails_every_group_not_durable_and_none_is_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, file_bytes: int
) -> None:
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory, file_bytes=file_bytes)
    told: list[JournalFailedError] = []
    journal.notify_failed = told.append
    assert write(journal, [group(0, 0)]) == [0]
    fail_at(step, journal, monkeypatch)
    with capture_logs() as logs:
        assert [journal.append(g, prepared(g)) for g in (group(0, 3), group(1, 0))] == [1, 2]
        wait_for(lambda: told, "the journal's failure was not told")
    failure = journal.failure
    assert failure is not None and told == [failure]
    assert failure.first_seq == 1
    assert journal.durable_seq == 0
    (event,) = [e for e in logs if e["event"] == "journal_failed"]
    assert event["first_seq"] == 1 and event["last_seq"] in (1, 2)
    assert "t[0]" in event["partitions"]
    # Later groups get numbers (the caller's bookkeeping) and fail with the rest.
    assert journal.append(group(0, 6), prepared(group(0, 6))) == 3
    snapshot = journal.snapshot()
    assert snapshot["failed"] is True
    assert snapshot["backlog_bytes"] == 0
    assert snapshot["last_error"] == failure.cause
    assert journal.durable_seq == 0
    monkeypatch.undo()
    journal.close(everything_sealed=True)  # still not: the failed groups' records are not
    assert files(directory)
    assert [g.seq for g in Journal(directory).recovered()] == [0]


def test_a_close_that_fails_after_a_failed_write_does_not_end_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed write's file is closed before the groups are written again elsewhere; a
    close that reports an error too (a network file system's deferred write) ended the
    thread. The groups are written again and reported durable."""
    journal = Journal(tmp_path / JOURNAL_DIR)
    write(journal, [group(0, 0)])
    real_flush, real_close = journal._flush, journal._close_file
    failures = [OSError(5, "Input/output error")]
    closes = [OSError(5, "Input/output error on close")]

    def flaky_flush(chunks: list[Any]) -> None:
        real_flush(chunks)
        if failures:
            raise failures.pop()

    def flaky_close() -> None:
        real_close()
        if not failures and closes:  # the close after the failed write
            raise closes.pop()

    monkeypatch.setattr(journal, "_flush", flaky_flush)
    monkeypatch.setattr(journal, "_close_file", flaky_close)
    assert write(journal, [group(0, 3)]) == [1]
    assert journal.failure is None
    assert not closes
    monkeypatch.undo()
    journal.close(everything_sealed=False)
    assert [g.seq for g in Journal(tmp_path / JOURNAL_DIR).recovered()] == [0, 1]


class Heard(NoListener):
    def __init__(self) -> None:
        self.durable = -1
        self.failures: list[JournalFailedError] = []
        self.changed = threading.Condition()

    def on_journaled(self, seq: int) -> None:
        with self.changed:
            self.durable = seq
            self.changed.notify_all()

    def on_journal_failed(self, error: JournalFailedError) -> None:
        with self.changed:
            self.failures.append(error)
            self.changed.notify_all()

    def wait(self, predicate: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, 10)


@pytest.mark.parametrize("step", STEPS)
def test_a_writer_whose_journal_failed_refuses_appends_and_seals_only_what_was_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The partition holding the failed group never seals (its records were never reported
    durable), the others do; appends are refused; the close says so at once instead of at
    its deadline; the restart replays the groups that were durable, and nothing else."""
    hour = RollPolicy(max_age_s=3600)
    store = Store.open(tmp_path / "data")
    heard = Heard()
    writer = store.writer(WriterPolicy(tick_s=0.01), heard, journal=True)
    for partition in (0, 1):
        writer.acquire("t", partition, roll=hour)
    for partition in (0, 1):
        seq = writer.append_group([Append("t", partition, (batch(range(3)),))])
        heard.wait(lambda seq=seq: heard.durable >= seq)  # type: ignore[misc]
    assert writer.journal is not None
    fail_at(step, writer.journal, monkeypatch)
    failed = writer.append_group([Append("t", 0, (batch(range(3, 6)),))])
    heard.wait(lambda: bool(heard.failures))
    assert heard.failures[0].first_seq == failed
    with pytest.raises(JournalFailedError):
        writer.append_group([Append("t", 1, (batch(range(3, 6)),))])
    writer.flush([("t", 1)], timeout_s=10)
    assert store.manifest.watermark("t", 1) == 3
    began = time.monotonic()
    with pytest.raises(JournalFailedError):
        writer.close(timeout_s=20)
    assert time.monotonic() - began < 5
    assert not store.manifest.watermark("t", 0)
    monkeypatch.undo()
    store.close()

    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(tick_s=0.01), journal=True)
    for partition in (0, 1):
        writer.acquire("t", partition, roll=hour)
    assert replay(writer, writer.acquire) == 3
    writer.close()
    for partition in (0, 1):
        offsets = store.read("t", partitions=[partition]).to_table().column("offset")
        assert sorted(offsets.to_pylist()) == [0, 1, 2]
    store.close()
