"""append_group: what must become durable together (a batch's schema runs, its producer
batch, its watermark move and its dead letters in another partition) is recorded in one
manifest transaction or not at all, and a retry after a failure lands it exactly once."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from plateau_core import Append, InvalidInputError, RollPolicy, Store, WriterPolicy
from plateau_core.policies import IndexPolicy
from plateau_core.producers import ProducerBatch
from plateau_core.sealing import WriteSegment
from plateau_core.segment_file import write_segment
from plateau_core.segment_stats import SegmentStats
from plateau_core.slog import SegmentLog
from tests.support import batch

HOUR = RollPolicy(max_age_s=3600)


class FailingWrite:
    """Fails the `nth` segment write (1-based) once with ENOSPC; the others write."""

    def __init__(self, nth: int) -> None:
        self.nth = nth
        self.calls = 0
        self.written: list[Path] = []
        self.before_retry: list[str] | None = None  # segment files there when the retry began

    def __call__(
        self,
        directory: Path,
        table: pa.Table,
        compression: str,
        *,
        fsync: bool,
        index: IndexPolicy | None = None,
    ) -> tuple[Path, SegmentStats]:
        self.calls += 1
        if self.calls == self.nth + 1:
            self.before_retry = sorted(p.name for p in directory.glob("*.arrow"))
        if self.calls == self.nth:
            raise OSError(errno.ENOSPC, "No space left on device")
        path, stats = write_segment(directory, table, compression, fsync=fsync, index=index)  # type: ignore[arg-type]
        self.written.append(path)
        return path, stats


def two_schemas(first: int) -> list[pa.RecordBatch]:
    """Rows at `first`.. in two schema runs: plain, then with an extra column."""
    extra = {"n": pa.array([1, 2], pa.int64())}
    return [batch([first, first + 1]), batch([first + 2, first + 3], extra=extra)]


def test_a_batch_in_two_schemas_is_recorded_whole_or_not_at_all(store: Store) -> None:
    failing = FailingWrite(nth=2)
    writer = store.writer(WriterPolicy(retry_backoff_s=0.05, tick_s=0.01))
    writer._write_segment = failing  # the second schema run's file fails once
    producer = ProducerBatch(7, 0, 0, 3, 0)
    try:
        writer.acquire("t", 0, roll=HOUR)
        writer.append_group([Append("t", 0, two_schemas(0), producer, urgent=True)])
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    assert failing.calls == 4  # two files, the second failed, then both again
    # The first try's file was removed with the failure and nothing was recorded: the retry
    # wrote the whole batch again.
    assert failing.before_retry == []
    rows = store.read("t").to_table()
    assert rows.column("offset").to_pylist() == [0, 1, 2, 3]
    assert [(s.start_offset, s.end_offset) for s in store.manifest.segments("t")] == [
        (0, 2),
        (2, 4),
    ]
    [state] = store.manifest.producer_states("t", 0).values()
    assert state.batches == (producer,)


def test_rows_a_watermark_move_and_dead_letters_commit_together(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = store.manifest.commit_seal
    seen: list[list[str]] = []

    def flaky(commits: list[object]) -> list[bool]:
        seen.append([c.describe() for c in commits])  # type: ignore[attr-defined]
        if len(seen) == 1:
            raise OSError("manifest unavailable")
        return original(commits)  # type: ignore[arg-type]

    monkeypatch.setattr(store.manifest, "commit_seal", flaky)
    writer = store.writer(WriterPolicy(retry_backoff_s=0.05, tick_s=0.01))
    try:
        writer.acquire("src", 0, roll=HOUR)
        writer.acquire("dlq", 0, roll=HOUR)
        # Offsets 0..4: 0 and 1 landed, 2..4 were poison sent to the dead-letter partition.
        writer.append_group(
            [
                Append("src", 0, [batch([0, 1])], advance_to=5, urgent=True),
                Append("dlq", 0, [batch([0, 1, 2])]),
            ]
        )
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    # Both partitions were in the failed transaction and in the retried one: never one alone.
    assert len(seen) == 2
    assert all(sorted(c.split("[")[0] for c in group) == ["dlq", "src"] for group in seen)
    assert store.manifest.watermark("src", 0) == 5
    assert store.manifest.watermark("dlq", 0) == 3
    assert store.read("dlq").to_table().num_rows == 3
    assert store.read("src").to_table().num_rows == 2


def test_a_producer_batch_of_only_poison_is_recorded_with_its_watermark_move(
    store: Store,
) -> None:
    writer = store.writer(WriterPolicy(tick_s=0.01))
    try:
        writer.acquire("t", 0, roll=HOUR)
        writer.append_group([Append("t", 0, [batch([0])], ProducerBatch(3, 0, 0, 0, 0))])
        writer.append_group([Append("t", 0, (), ProducerBatch(3, 0, 1, 2, 1), advance_to=3)])
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    assert store.manifest.watermark("t", 0) == 3
    [state] = store.manifest.producer_states("t", 0).values()
    assert [b.last_sequence for b in state.batches] == [0, 2]


def test_a_refused_group_changes_no_partition(store: Store) -> None:
    writer = store.writer(WriterPolicy(tick_s=0.01))
    try:
        writer.acquire("a", 0, roll=HOUR)
        writer.acquire("b", 0, roll=HOUR)
        writer.append("b", 0, batch([5]))
        with pytest.raises(InvalidInputError, match=r"b\[0\] column 'offset' starts at 4"):
            writer.append_group([Append("a", 0, [batch([0, 1])]), Append("b", 0, [batch([4])])])
        assert writer.stats().buffered_rows == 1  # b's own row; nothing of a's
        writer.append_group([Append("a", 0, [batch([0, 1])]), Append("b", 0, [batch([6])])])
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    assert store.read("a").to_table().column("offset").to_pylist() == [0, 1]
    assert store.read("b").to_table().column("offset").to_pylist() == [5, 6]


@pytest.fixture
def transactions(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The partitions each manifest transaction of a seal recorded, in order."""
    original = store.manifest.commit_seal
    seen: list[list[str]] = []

    def counted(commits: list[object]) -> list[bool]:
        seen.append(sorted(c.describe() for c in commits))  # type: ignore[attr-defined]
        return original(commits)  # type: ignore[arg-type]

    monkeypatch.setattr(store.manifest, "commit_seal", counted)
    return seen


def slow_write(seconds: float) -> WriteSegment:
    """write_segment taking `seconds` longer: what is appended meanwhile lands while the
    group is in flight or held, never by luck of timing."""

    def slow(  # type: ignore[no-untyped-def]
        directory: Path, table: pa.Table, compression: str, *, fsync: bool, index: IndexPolicy
    ):
        threading.Event().wait(seconds)
        return write_segment(directory, table, compression, fsync=fsync, index=index)  # type: ignore[arg-type]

    return slow


def test_sealing_together_records_every_due_partition_in_one_transaction(
    store: Store, transactions: list[list[str]]
) -> None:
    threads: set[str] = set()
    real_write = write_segment

    def noting(  # type: ignore[no-untyped-def]
        directory: Path, table: pa.Table, compression: str, *, fsync: bool, index: IndexPolicy
    ):
        threads.add(threading.current_thread().name)
        return real_write(directory, table, compression, fsync=fsync, index=index)  # type: ignore[arg-type]

    # A long tick: only seal_due() starts seals here, as a produce request's end does.
    writer = store.writer(WriterPolicy(seal_together=True, tick_s=3600))
    writer._write_segment = noting
    try:
        for p in range(3):
            writer.acquire("t", p, roll=HOUR)
        for p in range(3):
            writer.append("t", p, batch([0, 1]), urgent=True)
        assert transactions == []  # appends alone start nothing when sealing together
        writer.seal_due()
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    assert transactions == [["t[0]@0", "t[1]@0", "t[2]@0"]]
    assert len({t.split("_")[0] for t in threads}) == 1  # one seal thread wrote all three
    assert [store.manifest.watermark("t", p) for p in range(3)] == [2, 2, 2]


def test_a_request_starts_what_came_due_by_age_full_or_urgent_in_untouched_partitions_too(
    store: Store, transactions: list[list[str]]
) -> None:
    """A request's seal_due looks at its own partitions, and at the others only once one of
    them may have come due (by the ages it knows): what is due is started all the same."""
    writer = store.writer(WriterPolicy(seal_together=True, tick_s=3600))
    try:
        writer.acquire("t", 0, roll=HOUR)
        writer.acquire("t", 1, roll=HOUR)
        writer.acquire("t", 2, roll=RollPolicy(max_age_s=1.0))
        writer.acquire("t", 3, roll=RollPolicy(max_rows=4, max_age_s=3600))
        writer.append("t", 2, batch([0, 1]))
        writer.seal_due()
        writer.append("t", 0, batch([0, 1]))
        writer.seal_due()
        assert transactions == []  # nothing due yet
        threading.Event().wait(1.1)
        # t[2] aged meanwhile: this request, for t[1], starts it.
        writer.append("t", 1, batch([0, 1]))
        writer.seal_due()
        writer.flush([("t", 2)], timeout_s=10)
        assert transactions == [["t[2]@0"]]
        writer.append("t", 3, batch([0, 1, 2, 3]))  # full: due at once
        writer.seal_due()
        writer.flush([("t", 3)], timeout_s=10)
        assert transactions[1:] == [["t[3]@0"]]
        writer.append("t", 0, batch([2, 3]), urgent=True)
        writer.seal_due()
        writer.flush([("t", 0)], timeout_s=10)
        assert transactions[2:] == [["t[0]@0"]]
    finally:
        writer.close()
    assert [store.manifest.watermark("t", p) for p in range(4)] == [4, 2, 2, 4]  # close sealed t[1]


def test_a_request_does_not_look_at_every_partition_of_the_store(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store of hundreds of partitions: a request's seal_due asks its own partitions
    whether they are due, not all of them (that was a third of the listener's time per
    request at 512 partitions)."""
    asked: list[tuple[str, int]] = []
    real_due = SegmentLog.due

    def due(slog: SegmentLog, now: float) -> bool:
        asked.append(slog.key)
        return real_due(slog, now)

    writer = store.writer(WriterPolicy(seal_together=True, tick_s=3600))
    try:
        for p in range(200):
            writer.acquire("t", p, roll=HOUR)
            writer.append("t", p, batch([0, 1]))
        writer.seal_due()  # the first looks at every partition
        monkeypatch.setattr(SegmentLog, "due", due)
        for n in range(50):
            writer.append("t", n, batch([2, 3]))
            writer.seal_due()
        assert asked == [("t", n) for n in range(50)]
    finally:
        monkeypatch.undo()
        writer.close()


ONE_BY_ONE = [["t[0]@0"], ["t[1]@0", "t[2]@0"], ["t[0]@2"], ["t[1]@2"]]


@pytest.mark.parametrize(
    ("hold_s", "value_size", "expected"),
    [
        (0.0, 16, ONE_BY_ONE),
        (5.0, 16, [["t[0]@0"], ["t[1]@0", "t[2]@0"], ["t[0]@2", "t[1]@2"]]),
        # Files of 400 KB cost by their bytes, not per file: no hold after them.
        (5.0, 200_000, ONE_BY_ONE),
    ],
)
def test_a_group_hold_waits_for_as_many_requests_as_the_group_answered(
    store: Store,
    transactions: list[list[str]],
    hold_s: float,
    value_size: int,
    expected: list[list[str]],
) -> None:

    def request(p: int, first: int) -> None:  # one produce request: its records, then seal_due
        writer.append("t", p, batch([first, first + 1], value_size=value_size), urgent=True)
        writer.seal_due()

    writer = store.writer(WriterPolicy(seal_together=True, tick_s=0.01, group_hold_s=hold_s))
    writer._write_segment = slow_write(0.5)
    try:
        for p in range(3):
            writer.acquire("t", p, roll=HOUR)
        request(0, 0)  # starts a group at once
        request(1, 0)  # these two wait for it, then seal as the next group
        request(2, 0)
        writer.flush([("t", 1), ("t", 2)], timeout_s=10)
        # That group answered two requests: held, the next waits for two more.
        request(0, 2)
        request(1, 2)
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    assert transactions == expected
    assert [store.manifest.watermark("t", p) for p in range(3)] == [4, 4, 2]


def test_a_hold_runs_out_when_fewer_requests_come(
    store: Store, transactions: list[list[str]]
) -> None:

    writer = store.writer(WriterPolicy(seal_together=True, tick_s=0.01, group_hold_s=0.2))
    writer._write_segment = slow_write(0.3)
    try:
        for p in range(3):
            writer.acquire("t", p, roll=HOUR)
        for p in range(3):
            writer.append("t", p, batch([0, 1]), urgent=True)
            writer.seal_due()
        writer.flush(timeout_s=10)
        # The last group answered two requests; one comes, and it seals once the hold ends.
        writer.append("t", 0, batch([2, 3]), urgent=True)
        writer.seal_due()
        writer.flush(timeout_s=10)
    finally:
        writer.close()
    assert transactions[-1] == ["t[0]@2"]
    assert store.manifest.watermark("t", 0) == 4


def test_a_negative_group_hold_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="group_hold_s"):
        WriterPolicy(group_hold_s=-1)
