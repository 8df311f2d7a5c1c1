"""Manifest commits shared by concurrent seals: while one transaction commits, the seals that
finish writing their files queue up, and the next transaction records all of them, with one
sync of the database. Under load this turns many small commits into few, without making a
lone seal wait for company.

A seal is a group of partition commits that must land together (all or none); groups share
a transaction only as an optimisation, so a group that fails it is retried alone and only
the group at fault sees the error.

Whatever goes wrong on the commit thread fails the seals it holds and the thread goes on:
ended, it would leave them, and every seal after them, waiting for ever.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future

import structlog

from plateau_core.errors import ManifestConflictError, SealError
from plateau_core.manifest import Manifest
from plateau_core.manifest.records import PartitionCommit

log = structlog.get_logger(__name__)

_Group = tuple[list[PartitionCommit], "Future[list[bool]]"]


class GroupCommitter:
    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self._cond = threading.Condition()
        self._queue: list[_Group] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self.transactions = 0
        self.commits = 0

    def commit(self, group: Sequence[PartitionCommit]) -> list[bool]:
        """Record one seal (Manifest.commit_seal's contract), sharing the transaction with
        whatever else is waiting; blocks until it is committed."""
        future: Future[list[bool]] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the group committer is closed")
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="manifest-commit", daemon=True)
                # Kept only once started: one that did not start (no thread to be had) would
                # stand for a thread that never takes what is queued.
                thread.start()
                self._thread = thread
            self._queue.append((list(group), future))
            self._cond.notify()
        return future.result()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                waiting, self._queue = self._queue, []
            try:
                self._commit(waiting)
            except BaseException as exc:
                self._fail(waiting, exc)

    def _fail(self, waiting: list[_Group], exc: BaseException) -> None:
        """A fault outside what `_commit` handles: the seals not answered yet get it (their
        seal asks the manifest whether the commit landed)."""
        log.exception(
            "group_commit_failed",
            seals=len(waiting),
            partitions=sorted({f"{c.topic}[{c.partition}]" for group, _ in waiting for c in group}),
            error=f"{type(exc).__name__}: {exc}",
        )
        # As an Exception: a seal handles those (it asks the manifest, retries), and would
        # let anything else through, its partition left sealing for ever.
        failure = exc if isinstance(exc, Exception) else SealError(f"the commit failed: {exc!r}")
        for _, future in waiting:
            if not future.done():
                future.set_exception(failure)

    def _commit(self, waiting: list[_Group]) -> None:
        try:
            recorded = self.manifest.commit_seal([c for group, _ in waiting for c in group])
        except Exception as exc:
            if len(waiting) == 1:
                waiting[0][1].set_exception(exc)
                return
            if not isinstance(exc, ManifestConflictError):
                log.warning("group_commit_retried_alone", seals=len(waiting), error=str(exc))
            for one in waiting:
                self._commit([one])
            return
        self.transactions += 1
        at = 0
        for group, future in waiting:
            self.commits += len(group)
            future.set_result(recorded[at : at + len(group)])
            at += len(group)
