"""The journal: groups written, synced and read back after a restart; a torn tail is dropped,
a missing group stops the start; files go once their groups are sealed; and a writer with a
journal replays what it had not sealed."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from plateau_core import Append, RollPolicy, Store, WriterPolicy
from plateau_core.errors import BackpressureError, FlushTimeoutError
from plateau_core.journal import Journal
from plateau_core.journal_codec import FRAME, MAGIC, JournalCorruptError
from plateau_core.journal_files import JOURNAL_DIR, SUFFIX, write_all
from plateau_core.journal_replay import replay
from plateau_core.listener import NoListener
from plateau_core.producers import ProducerBatch
from plateau_core.rebuild import rebuild_manifest
from plateau_core.schema import normalized
from plateau_core.slog import Prepared
from tests.support import batch

REPO = Path(__file__).resolve().parents[2]


def prepared(appends: Sequence[Append]) -> list[list[Prepared]]:
    return [[Prepared(b, f, b.nbytes) for b, f in map(normalized, a.batches)] for a in appends]


def write(journal: Journal, groups: Sequence[Sequence[Append]]) -> list[int]:
    """Append the groups and wait until the last is durable; returns their numbers."""
    seqs = [journal.append(g, prepared(g)) for g in groups]
    deadline = time.monotonic() + 10
    while journal.durable_seq < seqs[-1]:
        assert time.monotonic() < deadline, "the journal did not sync"
        time.sleep(0.005)
    return seqs


def group(partition: int, start: int, rows: int = 3, **extra: object) -> list[Append]:
    return [Append("t", partition, (batch(range(start, start + rows)),), **extra)]  # type: ignore[arg-type]


def files(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{SUFFIX}"))


def test_groups_read_back_after_a_restart_as_they_were_written(tmp_path: Path) -> None:
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory)
    producer = ProducerBatch(7, 1, 10, 12, 3)
    wide = batch(range(6, 8), extra={"level": pa.array(["info", "warn"])})  # a second schema
    written = [
        group(0, 0),
        [
            Append("t", 1, (batch(range(3, 6)),), producer, 6),
            Append("t-dlq", 1, (batch(range(0, 1)),)),
        ],
        [Append("t", 1, (wide,))],
        [Append("t", 2, advance_to=40)],  # a watermark move alone
    ]
    assert write(journal, written) == [0, 1, 2, 3]
    journal.close(everything_sealed=False)

    again = Journal(directory)
    read = list(again.recovered())
    assert [g.seq for g in read] == [0, 1, 2, 3]
    for got, want in zip(read, written, strict=True):
        assert [(a.topic, a.partition, a.producer, a.advance_to) for a in got.appends] == [
            (a.topic, a.partition, a.producer, a.advance_to) for a in want
        ]
        for a, b in zip(got.appends, want, strict=True):
            assert [x.to_pylist() for x in a.batches] == [
                normalized(x)[0].to_pylist() for x in b.batches
            ]
    assert read[2].appends[0].batches[0].schema.names[-1] == "level"
    assert again.next_seq == 4  # numbering goes on after the groups read
    again.forget_recovered()
    assert files(directory) == []
    again.close(everything_sealed=True)


def test_a_torn_tail_is_dropped_and_said(tmp_path: Path) -> None:
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory)
    write(journal, [group(0, 0), group(0, 3), group(0, 6)])
    journal.close(everything_sealed=False)
    (path,) = files(directory)
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # the last frame cut short, as a crash mid-write leaves it

    with capture_logs() as logs:
        read = list(Journal(directory).recovered())
    assert [g.seq for g in read] == [0, 1]
    (event,) = [e for e in logs if e["event"] == "journal_tail_discarded"]
    assert event["file"] == path.name and event["groups_read"] == 2


def test_a_tail_of_zeros_is_a_torn_tail(tmp_path: Path) -> None:
    """Some filesystems show the part of a file a crash left unwritten as zeros: a frame of
    no bytes (whose checksum, of nothing, is zero too) ends the file like any torn frame."""
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory)
    write(journal, [group(0, 0), group(0, 3)])
    journal.close(everything_sealed=False)
    (path,) = files(directory)
    path.write_bytes(path.read_bytes() + bytes(4096))

    with capture_logs() as logs:
        again = Journal(directory)
        read = list(again.recovered())
    assert [g.seq for g in read] == [0, 1]
    assert again.next_seq == 2
    (event,) = [e for e in logs if e["event"] == "journal_tail_discarded"]
    assert event["reason"] == "the file ends in zeros"


def with_zlib_checksums(data: bytes) -> bytes:
    """A journal file as the journal's first releases wrote it: frames checksummed with
    zlib's CRC-32, not CRC-32C, under the same MAGIC."""
    out = bytearray(data)
    at = len(MAGIC)
    while at < len(out):
        length, _ = FRAME.unpack_from(out, at)
        body = bytes(out[at + FRAME.size : at + FRAME.size + length])
        FRAME.pack_into(out, at, length, zlib.crc32(body))
        at += FRAME.size + length
    return bytes(out)


def test_a_file_an_older_plateau_wrote_is_replayed_whole(tmp_path: Path) -> None:
    """Upgrading over an unclean stop: the groups acknowledged from a journal file with the
    older checksums are read back, not dropped as a torn tail, and numbering goes on after
    them; a torn tail of such a file is still a torn tail."""
    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(tick_s=0.01), journal=True)
    writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
    writer.append_group([Append("t", 0, (batch(range(0, 5)),))])
    writer.flush()
    seq = writer.append_group([Append("t", 0, (batch(range(5, 9)),))])
    writer.append_group([Append("t", 0, (batch(range(9, 12)),))])
    assert writer.journal is not None and seq is not None
    deadline = time.monotonic() + 10
    while writer.journal.durable_seq < seq + 1:
        assert time.monotonic() < deadline, "the journal did not sync"
        time.sleep(0.005)
    writer.journal.close(everything_sealed=False)
    writer._closed = True  # the process dies: nothing more is sealed
    for lock in writer._locks.values():
        lock.release()
    store.close()
    directory = tmp_path / "data" / JOURNAL_DIR
    (path,) = files(directory)
    older = with_zlib_checksums(path.read_bytes())
    path.write_bytes(older[:-3])  # the last group torn

    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(tick_s=0.01), journal=True)
    assert writer.journal is not None and writer.journal.next_seq == seq + 1
    writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
    assert replay(writer, writer.acquire) == 4
    assert store.read("t").to_table().column("offset").to_pylist() == list(range(9))
    writer.close()
    store.close()

    path.write_bytes(older)
    assert [g.seq for g in Journal(directory).recovered()] == [seq - 1, seq, seq + 1]


def test_a_new_file_of_zeros_is_a_torn_file(tmp_path: Path) -> None:
    """A crash right after a new file was made can leave its size on disk and not its
    header: nothing in it was synced, so nothing in it was acknowledged."""
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory)
    write(journal, [group(0, 0), group(0, 3)])
    journal.close(everything_sealed=False)
    (directory / f"{2:020d}{SUFFIX}").write_bytes(bytes(8))

    with capture_logs() as logs:
        again = Journal(directory)
        read = list(again.recovered())
    assert [g.seq for g in read] == [0, 1]
    assert again.next_seq == 2
    assert [e["reason"] for e in logs if e["event"] == "journal_tail_discarded"] == [
        "the file is all zeros"
    ]
    again.close(everything_sealed=False)


def test_a_group_missing_between_files_stops_the_start(tmp_path: Path) -> None:
    """A damaged frame followed by later groups: those before it were acknowledged and
    cannot be read, so going on would lose them."""
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory, file_bytes=1)  # a new file for every round of writes
    for start in (0, 3, 6):
        write(journal, [group(0, start)])
    journal.close(everything_sealed=False)
    first, second, _third = files(directory)
    damaged = bytearray(second.read_bytes())
    damaged[-5] ^= 0xFF  # the checksum no longer matches
    second.write_bytes(bytes(damaged))

    with pytest.raises(JournalCorruptError, match=r"groups 1\.\.1 are missing"):
        list(Journal(directory).recovered())
    assert first.exists()  # nothing is deleted on the way out


@pytest.mark.parametrize("damage", ["emptied", "zeroed", "first frame damaged"])
def test_a_first_file_that_reads_no_group_before_later_files_stops_the_start(
    tmp_path: Path, damage: str
) -> None:
    """The oldest file's groups are lost whole (emptied, zeroed, or damaged from its first
    frame on) while later files follow: its name says which groups it held, so they are
    missing, as between two files (the start went on without them, saying only that a
    tail was discarded)."""
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory, file_bytes=1)  # a new file for every round of writes
    for start in (0, 3, 6):
        write(journal, [group(0, start)])
    journal.close(everything_sealed=False)
    first, _second, _third = files(directory)
    data = bytearray(first.read_bytes())
    if damage == "emptied":
        data = bytearray()
    elif damage == "zeroed":
        data = bytearray(len(data))
    else:
        data[len(MAGIC) + FRAME.size + 3] ^= 0xFF
    first.write_bytes(bytes(data))

    with pytest.raises(JournalCorruptError, match=r"groups 0\.\.0 are missing"):
        list(Journal(directory).recovered())


def test_a_group_written_twice_is_read_once(tmp_path: Path) -> None:
    """After a failed sync the journal writes the groups again in a new file."""
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory)
    write(journal, [group(0, 0), group(0, 3)])
    journal.close(everything_sealed=False)
    (path,) = files(directory)
    copy = directory / f"{1:020d}{SUFFIX}"
    copy.write_bytes(path.read_bytes())  # groups 0 and 1 again, in a later file
    read = list(Journal(directory).recovered())
    assert [g.seq for g in read] == [0, 1]


def test_a_failed_sync_writes_the_groups_again_to_a_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory)
    write(journal, [group(0, 0)])
    real = journal._flush
    failures = [OSError(5, "Input/output error")]

    def flaky(chunks: list[object]) -> None:
        real(chunks)  # type: ignore[arg-type]
        if failures:
            raise failures.pop()

    journal._flush = flaky  # type: ignore[method-assign,assignment]
    with capture_logs() as logs:
        write(journal, [group(0, 3), group(0, 6)])
    assert [e["event"] for e in logs].count("journal_write_failed") == 1
    journal.close(everything_sealed=False)
    assert len(files(directory)) == 2
    assert [g.seq for g in Journal(directory).recovered()] == [0, 1, 2]


def test_files_go_once_their_groups_are_sealed(tmp_path: Path) -> None:
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory, file_bytes=1)
    for start in range(0, 12, 3):
        write(journal, [group(0, start)])
    assert len(files(directory)) == 4
    journal.release(2)  # groups 0 and 1 sealed
    assert [p.name for p in files(directory)] == [f"{n:020d}{SUFFIX}" for n in (2, 3)]
    journal.release(100)  # the file being written stays
    assert [p.name for p in files(directory)] == [f"{3:020d}{SUFFIX}"]
    journal.close(everything_sealed=True)
    assert files(directory) == []


def test_cut_names_the_groups_to_seal_for_the_files_to_fit(tmp_path: Path) -> None:
    directory = tmp_path / JOURNAL_DIR
    journal = Journal(directory, file_bytes=1)  # a file per group
    try:
        write(journal, [group(0, start) for start in range(0, 12, 3)])
        sizes = [p.stat().st_size for p in files(directory)]
        assert len(sizes) == 4
        assert journal.cut(sum(sizes)) is None
        assert journal.cut(sum(sizes) - 1) == 1  # file 0 must go: group 0 sealed
        assert journal.cut(sizes[2] + sizes[3]) == 2
        assert journal.cut(0) == 3  # the file being written always stays
    finally:
        journal.close(everything_sealed=True)


def test_old_unsealed_records_seal_early_once_the_journal_outgrows_its_limit(
    tmp_path: Path,
) -> None:
    """A partition whose roll is an hour keeps every journal file written after its first
    record; past journal_max_bytes it seals early and the files go."""
    from plateau_core.journaled_writer import JournaledWriter  # noqa: PLC0415

    store = Store.open(tmp_path / "data")
    limit = 64 * 1024
    writer = JournaledWriter(
        store,
        Journal(tmp_path / "data" / JOURNAL_DIR, file_bytes=8 * 1024),
        WriterPolicy(tick_s=0.01, journal_max_bytes=limit),
    )
    try:
        writer.acquire("quiet", 0, roll=RollPolicy(max_age_s=3600))
        writer.acquire("busy", 0, roll=RollPolicy(max_age_s=0.01))
        writer.append_group([Append("quiet", 0, (batch([0]),))])
        with capture_logs() as logs:
            for start in range(0, 4000, 20):
                writer.append_group(
                    [Append("busy", 0, (batch(range(start, start + 20), value_size=64),))]
                )
                time.sleep(0.002)
            deadline = time.monotonic() + 10
            while store.manifest.watermark("quiet", 0) != 1:
                assert time.monotonic() < deadline, "the quiet partition never sealed"
                time.sleep(0.01)
        written = writer.journal.snapshot()["bytes_written"]
        assert isinstance(written, int) and written > 4 * limit
        # A soft limit (seals take their time on a busy machine, and the journal grows
        # meanwhile), so what is checked is where it settles.
        deadline = time.monotonic() + 10
        while writer.journal.snapshot()["disk_bytes"] > limit + 2 * 8 * 1024:  # type: ignore[operator]
            assert time.monotonic() < deadline, "the journal stayed over its limit"
            time.sleep(0.01)
        early = [e for e in logs if e["event"] == "seal_early"]
        # The busy partition may seal early too, when a group of it sat in an old file.
        assert ("quiet", 0, 0) in [(e["topic"], e["partition"], e["last_offset"]) for e in early]
        writer.flush()
        assert store.read("busy").to_table().column("offset").to_pylist() == list(range(4000))
    finally:
        writer.close()
        store.close()


def test_one_journal_per_folder(tmp_path: Path) -> None:
    journal = Journal(tmp_path / JOURNAL_DIR)
    try:
        with pytest.raises(Exception, match="owned by another writer"):
            Journal(tmp_path / JOURNAL_DIR, lock_timeout_s=0.1)
    finally:
        journal.close(everything_sealed=True)


class Journaled(NoListener):
    def __init__(self) -> None:
        self.durable = -1
        self.changed = threading.Condition()

    def on_journaled(self, seq: int) -> None:
        with self.changed:
            self.durable = seq
            self.changed.notify_all()

    def wait(self, seq: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.durable >= seq, 10)


def test_a_writer_replays_what_it_had_not_sealed(tmp_path: Path) -> None:
    """Groups journaled and never sealed (the process died) are appended again on the next
    start, with their offsets and producer batches, and sealed before anything new."""
    store = Store.open(tmp_path / "data")
    listener = Journaled()
    writer = store.writer(WriterPolicy(tick_s=0.01), listener, journal=True)
    writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
    writer.acquire("t", 1, roll=RollPolicy(max_age_s=3600))
    writer.acquire("dlq", 0, roll=RollPolicy(max_age_s=3600))
    writer.append_group([Append("t", 0, (batch(range(0, 5)),))])
    writer.flush()  # sealed: not replayed
    producer = ProducerBatch(3, 0, 0, 4, 5)
    writer.append_group([Append("t", 0, (batch(range(5, 10)),), producer, 10)])
    seq = writer.append_group(
        [Append("t", 1, (batch(range(0, 2)),), advance_to=4), Append("dlq", 0, (batch([0]),))]
    )
    assert seq is not None
    listener.wait(seq)
    # A crash: the files stay, nothing is sealed or released, the locks go with the process.
    assert writer.journal is not None
    writer.journal.close(everything_sealed=False)
    writer._closed = True  # stop its threads without sealing
    for lock in writer._locks.values():
        lock.release()
    store.close()

    store = Store.open(tmp_path / "data")
    writer = store.writer(WriterPolicy(tick_s=0.01), journal=True)
    writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
    writer.acquire("t", 1, roll=RollPolicy(max_age_s=3600))
    acquired: list[tuple[str, int]] = []

    def acquire(topic: str, partition: int) -> None:
        acquired.append((topic, partition))
        writer.acquire(topic, partition)

    with capture_logs() as logs:
        assert replay(writer, acquire) == 5 + 2 + 1
    assert acquired == [("dlq", 0)]
    assert store.manifest.watermark("t", 0) == 10
    assert store.manifest.watermark("t", 1) == 4  # the advance over offsets 2 and 3
    assert store.manifest.watermark("dlq", 0) == 1
    states = store.manifest.producer_states("t", 0)
    assert states[3].batches[-1] == producer
    assert store.read("t", partitions=[0]).to_table().column("offset").to_pylist() == list(
        range(10)
    )
    events = {(e["topic"], e["partition"]): e for e in logs if e["event"] == "journal_replayed"}
    assert events[("t", 0)]["start_offset"] == 5 and events[("t", 0)]["end_offset"] == 10
    assert files(tmp_path / "data" / JOURNAL_DIR) == []
    # Numbering goes on after what was read, and a clean close leaves no journal.
    assert writer.append_group([Append("t", 0, (batch(range(10, 12)),))]) == seq + 1
    writer.close()
    assert files(tmp_path / "data" / JOURNAL_DIR) == []
    store.close()


def started_writer(data_dir: Path) -> subprocess.Popen[str]:
    """tests.core.journal_writer over `data_dir`, once it has replayed and sealed what the
    last one left, and appends."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.core.journal_writer", str(data_dir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        child.kill()
        raise AssertionError("the journal writer did not start")
    return child


def test_kill_9_loses_no_journaled_group_and_stores_none_twice(tmp_path: Path) -> None:
    """A writer appending groups (rows to one partition, a record to another) is killed at
    random moments and started again: every group it reported durable is in the store
    after the replay, both of its partitions, and the offsets run without a gap or a
    repeat."""
    rng = random.Random(int(os.environ.get("PLATEAU_CRASH_SEED", "5")))
    data_dir = tmp_path / "data"
    acked = (0, 0)
    for kill in range(5):
        child = started_writer(data_dir)
        try:
            assert child.stdout is not None
            deadline = time.monotonic() + (rng.uniform(0.3, 1.0) if kill < 4 else 0)
            while time.monotonic() < deadline:
                line = child.stdout.readline().split()
                if line and line[0] == "acked":
                    acked = (int(line[1]), int(line[2]))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
    # The last start replayed and sealed what the kill before it left, then was killed too.
    assert acked[0] > 0, "nothing was acknowledged: the test means nothing"
    with Store.open(data_dir) as store:
        for topic, at_least in (("main", acked[0]), ("side", acked[1])):
            offsets = store.read(topic, partitions=[0]).to_table().column("offset").to_pylist()
            assert offsets == list(range(len(offsets))), f"{topic}: a gap or a repeat"
            assert len(offsets) >= at_least, f"{topic}: acknowledged records lost"


def test_a_write_that_takes_part_of_the_chunks_goes_on_with_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """writev may write fewer bytes than asked, ending inside a chunk."""
    path = tmp_path / "out"
    real = os.writev

    def stingy(fd: int, chunks: Sequence[bytes]) -> int:
        return real(fd, [bytes(memoryview(b"".join(bytes(c) for c in chunks))[:7])])

    monkeypatch.setattr("plateau_core.journal.os.writev", stingy)
    chunks = [b"abc", b"", pa.py_buffer(b"defghijk"), memoryview(b"lmnopqrstuvwxyz")[2:]]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        write_all(fd, chunks)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"abcdefghijknopqrstuvwxyz"


def test_a_close_while_a_seal_runs_and_then_fails_keeps_its_groups(tmp_path: Path) -> None:
    """A shutdown whose flush runs out of time while a seal is in flight (a full disk, a
    locked manifest): when that seal then fails, its journal groups stay for the next start
    instead of going with a journal closed as if everything were sealed."""
    from plateau_core.journaled_writer import JournaledWriter  # noqa: PLC0415

    data = tmp_path / "data"
    store = Store.open(data)
    entered, failing = threading.Event(), threading.Event()

    def fails_late(*args: object, **kwargs: object) -> object:
        entered.set()
        failing.wait(10)
        raise OSError(28, "No space left on device")

    listener = Journaled()
    writer = JournaledWriter(
        store, Journal(data / JOURNAL_DIR), WriterPolicy(tick_s=0.01), listener, write=fails_late
    )
    writer.acquire("t", 0, roll=RollPolicy(max_age_s=0.01))
    seq = writer.append_group([Append("t", 0, (batch(range(5)),))])
    assert seq is not None
    listener.wait(seq)
    assert entered.wait(10)
    threading.Timer(0.4, failing.set).start()
    with capture_logs() as logs, pytest.raises(FlushTimeoutError):
        writer.close(timeout_s=0.2)
    released = [e for e in logs if e["event"] == "partition_released"]
    assert released[0]["dropped_rows"] == 5
    assert files(data / JOURNAL_DIR) != []
    store.close()

    store = Store.open(data)
    writer = store.writer(WriterPolicy(tick_s=0.01), journal=True)
    writer.acquire("t", 0)
    assert replay(writer, writer.acquire) == 5
    writer.close()
    assert store.read("t").to_table().column("offset").to_pylist() == list(range(5))
    store.close()


def test_nothing_seals_before_its_group_is_durable_in_the_journal(tmp_path: Path) -> None:
    """A group spans partitions (a batch with its watermark move over a poison record, and
    the dead letter): no part of it reaches the manifest before the journal holds all of it,
    or a crash in between would keep the move and lose the letter."""
    from plateau_core.journaled_writer import JournaledWriter  # noqa: PLC0415

    data = tmp_path / "data"
    store = Store.open(data)
    journal = Journal(data / JOURNAL_DIR)
    flush = journal._flush
    failing = threading.Event()
    failing.set()

    def flaky(chunks: Sequence[object]) -> None:
        if failing.is_set():
            raise OSError(5, "Input/output error")
        flush(chunks)  # type: ignore[arg-type]

    journal._flush = flaky  # type: ignore[method-assign]
    listener = Journaled()
    writer = JournaledWriter(store, journal, WriterPolicy(tick_s=0.01), listener)
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_age_s=0.01))
        writer.acquire("t-dlq", 0, roll=RollPolicy(max_age_s=0.01))
        seq = writer.append_group(
            [Append("t", 0, (batch(range(5)),), advance_to=6), Append("t-dlq", 0, (batch([0]),))]
        )
        assert seq is not None
        time.sleep(0.3)  # many rolls
        assert store.manifest.watermark("t", 0) is None
        assert store.manifest.watermark("t-dlq", 0) is None
        failing.clear()
        listener.wait(seq)
        writer.flush()
        assert store.manifest.watermark("t", 0) == 6
        assert store.manifest.watermark("t-dlq", 0) == 1
    finally:
        writer.close()
        store.close()


def test_the_replay_is_not_held_back_by_the_disk_floor(tmp_path: Path) -> None:
    """A restart on a disk below min_free_disk: the replay turns the journal into segments
    (and frees it) instead of refusing, which would keep serve from starting at all."""
    data = tmp_path / "data"
    store = Store.open(data)
    listener = Journaled()
    writer = store.writer(WriterPolicy(tick_s=0.01), listener, journal=True)
    writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
    seq = writer.append_group([Append("t", 0, (batch(range(5)),))])
    assert seq is not None
    listener.wait(seq)
    assert writer.journal is not None
    writer.journal.close(everything_sealed=False)  # a crash: nothing sealed
    writer._closed = True
    for lock in writer._locks.values():
        lock.release()
    store.close()

    store = Store.open(data)
    floor = shutil.disk_usage(data).free + 1024**3  # below the floor whatever happens
    writer = store.writer(WriterPolicy(tick_s=0.01, min_free_disk_bytes=floor), journal=True)
    writer.acquire("t", 0)
    assert replay(writer, writer.acquire, timeout_s=10) == 5
    assert store.read("t").to_table().column("offset").to_pylist() == list(range(5))
    with pytest.raises(BackpressureError):  # new records still wait for room
        writer.append_group([Append("t", 0, (batch([5]),))])
    writer.close()
    store.close()


def test_a_rebuilt_manifest_takes_back_the_watermark_move_a_sealed_group_made(
    tmp_path: Path,
) -> None:
    """A group of rows and a watermark move over the records after them (poison skipped or
    dead-lettered) is sealed, and stays in the journal's file being written; the process
    dies and the manifest is rebuilt from the segment files, which end the watermark at the
    last row. The replay moves it over the skipped records again (it refused the group as
    reaching across the watermark, and serve could not start)."""
    data = tmp_path / "data"
    store = Store.open(data)
    listener = Journaled()
    writer = store.writer(WriterPolicy(tick_s=0.01), listener, journal=True)
    writer.acquire("t", 0, roll=RollPolicy(max_age_s=3600))
    producer = ProducerBatch(7, 0, 0, 4, 0)
    seq = writer.append_group([Append("t", 0, (batch(range(3)),), producer, advance_to=5)])
    assert seq is not None
    listener.wait(seq)
    writer.flush()
    assert store.manifest.watermark("t", 0) == 5
    assert writer.journal is not None
    writer.journal.close(everything_sealed=False)  # a crash: the file being written stays
    writer._closed = True
    for lock in writer._locks.values():
        lock.release()
    store.close()
    assert files(data / JOURNAL_DIR)
    for path in data.glob("manifest.db*"):
        path.unlink()
    rebuild_manifest(data)

    store = Store.open(data)
    assert store.manifest.watermark("t", 0) == 3
    writer = store.writer(WriterPolicy(tick_s=0.01), journal=True)
    writer.acquire("t", 0)
    assert replay(writer, writer.acquire, timeout_s=10) == 0
    assert store.manifest.watermark("t", 0) == 5
    assert store.manifest.producer_states("t", 0)[7].batches[-1] == producer
    assert store.read("t").to_table().column("offset").to_pylist() == [0, 1, 2]
    assert files(data / JOURNAL_DIR) == []
    writer.close()
    store.close()
