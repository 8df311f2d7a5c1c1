"""Manifest commits shared by concurrent seals: while one transaction commits, the seals that
finish writing their files queue up, and the next transaction records all of them, with one
sync of the database. Under load this turns many small commits into few, without making a
lone seal wait for company.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import structlog

from plateau_core.errors import ManifestConflictError
from plateau_core.manifest import Manifest
from plateau_core.manifest.records import SegmentCommit

log = structlog.get_logger(__name__)


class GroupCommitter:
    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self._cond = threading.Condition()
        self._queue: list[tuple[SegmentCommit, Future[bool]]] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self.transactions = 0
        self.commits = 0

    def commit(self, commit: SegmentCommit) -> bool:
        """Record one segment (commit_segment's contract), sharing the transaction with
        whatever else is waiting; blocks until it is committed."""
        future: Future[bool] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the group committer is closed")
            self._queue.append((commit, future))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="manifest-commit", daemon=True
                )
                self._thread.start()
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
                batch, self._queue = self._queue, []
            self._commit(batch)

    def _commit(self, batch: list[tuple[SegmentCommit, Future[bool]]]) -> None:
        try:
            recorded = self.manifest.commit_segments([c for c, _ in batch])
        except Exception as exc:
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
                return
            # One of them failed the transaction for all: each on its own, so only the
            # one at fault sees the error.
            if not isinstance(exc, ManifestConflictError):
                log.warning("group_commit_retried_alone", segments=len(batch), error=str(exc))
            for commit, future in batch:
                self._commit([(commit, future)])
            return
        self.transactions += 1
        self.commits += len(batch)
        for (_, future), done in zip(batch, recorded, strict=True):
            future.set_result(done)
