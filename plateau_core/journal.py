"""The journal: a writer's append groups, written in order to one file at a time and synced,
so that records are durable before they are sealed. The Kafka API answers acks=all from it:
one small sequential write and one data sync per round of produce requests, instead of a
sealed segment file per partition and a manifest commit (docs/benchmarks.md).

Groups get consecutive sequence numbers. A thread writes what was appended since its last
round and syncs it, then reports the highest number now durable (`notify`). Once the writer
has sealed every group below some number it calls `release`, and files holding only those
groups are deleted. After a crash, the groups of the files left are read back in order
(`recovered`) and replayed into the writer, which seals them before taking new appends.

A file that ends in a torn frame (the crash came mid-write) is read up to it: nothing in a
torn frame was acknowledged, since a group counts as durable only once synced whole. A gap
in the sequence numbers, though, is a group that was written and cannot be read: that stops
the start (JournalCorruptError) rather than going on without it.

A write or sync that fails is retried, whole, in a new file. Anything else that goes wrong
on the thread (encoding a group, a fault in this code) ends it: the groups not durable yet
fail together (`failure`, and `notify_failed` tells the owner), what was written of them is
taken out of the files so a restart does not replay records their producers were told had
failed, and every later group fails too. Nothing waits for a thread that is gone.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import structlog

from plateau_core.errors import JournalFailedError
from plateau_core.journal_codec import (
    MAGIC,
    Chunk,
    Encoded,
    FileRead,
    Group,
    SchemaIds,
    encode_group,
    encode_schema,
    groups_in_order,
)
from plateau_core.journal_files import (
    SUFFIX,
    journal_name,
    last_seq,
    numbered,
    read_path,
    sync_dir,
    write_all,
)
from plateau_core.names import fsync_path
from plateau_core.partition_lock import PartitionLock
from plateau_core.policies import JOURNAL_FILE_BYTES
from plateau_core.slog import Append, Prepared

log = structlog.get_logger(__name__)

FILE_BYTES = JOURNAL_FILE_BYTES  # a new file once the current one holds this much
_RETRY_S = (0.05, 0.2, 1.0, 5.0)


class Journal:
    def __init__(
        self,
        directory: Path,
        *,
        fsync: bool = True,
        file_bytes: int = FILE_BYTES,
        lock_timeout_s: float = 30.0,
    ) -> None:
        self.directory = directory
        self.fsync = fsync
        self.file_bytes = file_bytes
        self._lock = PartitionLock.acquire(directory, lock_timeout_s)
        self.notify: Callable[[int], None] = _ignore
        self.notify_failed: Callable[[JournalFailedError], None] = _ignore_failure
        # Set once, when the thread stops on an error: every group from its first_seq on.
        self.failure: JournalFailedError | None = None
        self._ids = SchemaIds()
        self._cond = threading.Condition()
        self._pending: list[_Queued] = []
        self._retry: list[Encoded] = []  # written once, failed: written again, whole
        self._retry_bytes = 0
        self._in_hand: list[_Queued] = []  # the groups of the round being written
        self.backlog_bytes = 0  # appended, not yet durable
        self._files: list[_File] = []  # written by this journal, oldest first
        self._fd: int | None = None
        self._size = 0
        self._file_schemas: set[int] = set()
        # The file written to and its size when the last round was synced: what a failure
        # truncates it back to.
        self._acked: tuple[Path, int] | None = None
        self._closing = False
        self._failures = 0
        self.last_error: str | None = None
        # Totals since start, for status and /metrics.
        self.syncs = 0
        self.write_failures = 0
        self.bytes_written = 0
        old = sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX))
        self._recovered_files = old
        named = [int(p.name.removesuffix(SUFFIX)) for p in old if numbered(p)]
        self.next_seq = max([last_seq(old), *(n - 1 for n in named), -1]) + 1
        self.durable_seq = self.next_seq - 1
        self._thread = threading.Thread(target=self._run, name="journal", daemon=True)
        self._thread.start()

    # --- after a crash ------------------------------------------------------------------------

    def recovered(self) -> Iterator[Group]:
        """The groups the files present at start hold, in order (see the module's rules).
        One file is read at a time: a journal may hold more than fits in memory at once."""
        return groups_in_order(self._read_recovered())

    def _read_recovered(self) -> Iterator[tuple[str, FileRead]]:
        for path in self._recovered_files:
            read = read_path(path)
            if read.torn_at is not None:
                log.warning(
                    "journal_tail_discarded",
                    file=path.name,
                    at_byte=read.torn_at,
                    reason=read.torn_reason,
                    groups_read=len(read.groups),
                )
            yield path.name, read

    def forget_recovered(self) -> None:
        """Everything `recovered` returned is sealed: delete the files it came from."""
        for path in self._recovered_files:
            path.unlink(missing_ok=True)
        self._recovered_files = []
        sync_dir(self.directory, self.fsync)

    # --- appends ------------------------------------------------------------------------------

    def append(self, appends: Sequence[Append], prepared: Sequence[Sequence[Prepared]]) -> int:
        """Queue one group for the next write; returns its sequence number. The caller keeps
        groups of a partition in its order of appending (the writer holds its lock).

        The group is encoded by the journal's thread, not here: encoding checksums its bytes,
        which lets go of the interpreter lock, and the appending thread (the listener) would
        then wait for it back."""
        nbytes = sum(p.nbytes for batches in prepared for p in batches)
        with self._cond:
            seq = self.next_seq
            self.next_seq += 1
            # After a failure no thread would take it: it fails with the others (`failure`
            # holds every group from its first_seq on).
            if self.failure is None:
                self._pending.append(_Queued(seq, appends, prepared, nbytes))
                self.backlog_bytes += nbytes
                self._cond.notify()
        return seq

    def release(self, below: int) -> None:
        """Every group numbered below `below` is sealed: delete the files holding only such
        groups (never the file being written)."""
        doomed: list[Path] = []
        with self._cond:
            while len(self._files) > 1 and self._files[1].first_seq <= below:
                doomed.append(self._files.pop(0).path)
        for path in doomed:
            path.unlink(missing_ok=True)
            log.debug("journal_file_released", file=path.name, below=below)
        if doomed:
            # Otherwise, after a power loss, an older file could come back while a newer
            # one's deletion stuck, and the start would find a gap in the groups.
            sync_dir(self.directory, self.fsync)

    def cut(self, max_bytes: int) -> int | None:
        """The group number below which every group must be sealed for the files on disk to
        fit in `max_bytes` (the file being written always stays); None when they fit.

        Files go oldest first, and only once every group before the next file is sealed: a
        partition whose oldest unsealed records arrived long ago (a long roll.max_age, a quiet
        topic) keeps every file written since, whatever else sealed meanwhile."""
        with self._cond:
            total = 0
            for index in range(len(self._files) - 1, -1, -1):
                total += self._files[index].nbytes
                if total > max_bytes:
                    return self._files[min(index + 1, len(self._files) - 1)].first_seq
        return None

    def snapshot(self) -> dict[str, object]:
        """Figures for status and /metrics."""
        with self._cond:
            return {
                "durable_seq": self.durable_seq,
                "backlog_bytes": self.backlog_bytes,
                "syncs": self.syncs,
                "bytes_written": self.bytes_written,
                "write_failures": self.write_failures,
                "last_error": self.last_error,
                "failed": self.failure is not None,
                "files": len(self._files),
                # Counted as written, not by stat(): a seal thread may delete a file meanwhile.
                "disk_bytes": sum(f.nbytes for f in self._files),
            }

    def close(self, *, everything_sealed: bool) -> None:
        """Write what is queued and stop; with everything sealed, no file is needed again."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=60)
        if self._thread.is_alive():
            # A write or sync stuck in the kernel: closing its descriptor now could let it
            # land in whatever file takes the number next. Leave both to the process's end.
            log.error("journal_thread_stuck", first_unwritten_seq=self.durable_seq + 1)
            self._lock.release()
            return
        self._close_file()
        if everything_sealed and not self._pending and not self._retry and self.failure is None:
            for file in self._files:
                file.path.unlink(missing_ok=True)
            self._files = []
            sync_dir(self.directory, self.fsync)
        self._lock.release()

    # --- the journal thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._rounds()
        except BaseException as exc:
            # Whatever it was, the thread is done: the groups waiting on it must hear so, or
            # whoever waits for them (a producer's acks=all) would wait for ever.
            self._broke(exc)

    def _rounds(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._retry and not self._closing:
                    self._cond.wait()
                if not self._pending and not self._retry:
                    return
                queued = self._pending
                self._pending = []
                self._in_hand += queued
            batch = self._retry + [
                encode_group(q.seq, q.appends, q.prepared, self._ids) for q in queued
            ]
            owed = self._retry_bytes + sum(q.nbytes for q in queued)  # of the backlog
            self._retry, self._retry_bytes = [], 0
            try:
                self._write(batch)
            except OSError as exc:
                self._retry, self._retry_bytes = batch, owed
                self._failed(batch, exc)
                continue
            written = sum(e.nbytes for e in batch)
            with self._cond:
                self.backlog_bytes -= owed
                self.durable_seq = batch[-1].seq
                self._in_hand = []
                self._acked = (self._files[-1].path, self._size)
                self._failures = 0
                self.last_error = None
                self.syncs += 1
                self.bytes_written += written
            self.notify(batch[-1].seq)

    def _broke(self, exc: BaseException) -> None:
        """The thread stops on `exc`: fail every group not durable, now and to come."""
        with self._cond:
            first = self.durable_seq + 1
            failure = JournalFailedError(first, f"{type(exc).__name__}: {exc}")
            self.failure = failure
            self.last_error = failure.cause
            partitions = sorted(
                {(a.topic, a.partition) for q in self._in_hand + self._pending for a in q.appends}
            )
            self._in_hand, self._pending, self._retry, self._retry_bytes = [], [], [], 0
            self.backlog_bytes = 0
            # Files opened for the failed groups hold nothing durable; the one the last
            # synced round ended in is cut back to where it ended (the last file now, which
            # `release` never deletes).
            unsynced = [f for f in self._files if f.first_seq >= first]
            self._files = [f for f in self._files if f.first_seq < first]
            acked = self._acked if self._files and self._acked else None
            if acked is not None and acked[0] != self._files[-1].path:
                acked = None
            if acked is not None:
                self._files[-1].nbytes = acked[1]
        log.error(
            "journal_failed",
            first_seq=first,
            last_seq=self.next_seq - 1,
            partitions=[f"{topic}[{partition}]" for topic, partition in partitions],
            error=failure.cause,
            exc_info=exc,
        )
        self._discard(unsynced, acked)
        self.notify_failed(failure)

    def _discard(self, unsynced: list[_File], acked: tuple[Path, int] | None) -> None:
        """Take what was written of the failed groups out of the files: replayed after a
        restart, their records would land although their producers were told they failed,
        and sent them again."""
        try:
            with contextlib.suppress(OSError):
                self._close_file()
            for file in unsynced:
                file.path.unlink(missing_ok=True)
            if acked is not None and acked[0].stat().st_size > acked[1]:
                os.truncate(acked[0], acked[1])
                if self.fsync:
                    fsync_path(acked[0])
            sync_dir(self.directory, self.fsync)
        except OSError as exc:
            log.error(
                "journal_failed_groups_kept",
                error=f"{type(exc).__name__}: {exc}",
                reason="a restart may replay records whose producers were told they failed",
            )

    def _write(self, batch: list[Encoded]) -> None:
        chunks: list[Chunk] = []
        for encoded in batch:
            if self._fd is None or self._size >= self.file_bytes:
                self._flush(chunks)
                chunks = []
                self._open_file(encoded.seq)
            for number in encoded.schema_ids:
                if number not in self._file_schemas:
                    schema = encode_schema(number, self._ids.schemas[number])
                    chunks.append(schema)
                    self._size += len(schema)
                    self._file_schemas.add(number)
            chunks.extend(encoded.chunks)
            self._size += encoded.nbytes
        self._flush(chunks)

    def _flush(self, chunks: list[Chunk]) -> None:
        if not chunks:
            return
        assert self._fd is not None
        write_all(self._fd, chunks)
        if self.fsync:
            os.fdatasync(self._fd)
        with self._cond:
            self._files[-1].nbytes = self._size

    def _open_file(self, first_seq: int) -> None:
        self._close_file()
        path = self.directory / journal_name(first_seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, [MAGIC])
            if self.fsync:
                os.fsync(fd)
            sync_dir(self.directory, self.fsync)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._size, self._file_schemas = fd, len(MAGIC), set()
        with self._cond:
            # Rewritten after a failure under the same first group: one file, listed once.
            if not self._files or self._files[-1].path != path:
                self._files.append(_File(first_seq, path, len(MAGIC)))
            else:
                self._files[-1].nbytes = len(MAGIC)

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _failed(self, batch: list[Encoded], exc: OSError) -> None:
        """A write or sync failed: what it held is not durable. After a failed sync the
        kernel may have dropped the dirty pages and a second sync can report success, so the
        groups are written again, whole, to a new file (a reader skips the copies)."""
        self._failures += 1
        self.write_failures += 1
        delay = _RETRY_S[min(self._failures, len(_RETRY_S)) - 1]
        self.last_error = f"{type(exc).__name__}: {exc}"
        log.error(
            "journal_write_failed",
            first_seq=batch[0].seq,
            last_seq=batch[-1].seq,
            error=self.last_error,
            retry_in_s=delay,
        )
        # Linux lets the descriptor go even when close reports an error (a network file
        # system's deferred write, say): raised here, it would end the thread.
        with contextlib.suppress(OSError):
            self._close_file()
        time.sleep(delay)


@dataclass
class _File:
    first_seq: int
    path: Path
    nbytes: int  # written to it so far


class _Queued(NamedTuple):
    seq: int
    appends: Sequence[Append]
    prepared: Sequence[Sequence[Prepared]]
    nbytes: int


def _ignore(_seq: int) -> None:
    """No one to tell (a journal nobody listens to, as in tests of the file format)."""


def _ignore_failure(_failure: JournalFailedError) -> None:
    """No one to tell; `failure` says it all the same."""
