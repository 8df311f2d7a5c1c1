"""A bounded pool of daemon threads for the seals: what a ThreadPoolExecutor gives them, but
threads the interpreter does not join at exit.

A ThreadPoolExecutor's threads are joined when the process exits. A seal stuck in a call
that does not return (a disk that hangs) then kept the process from ever exiting, past any
deadline its stop set, although stopping mid-seal is what a crash does and recovery is built
for: the seal's records are in the journal or still in Kafka. The writer's close still waits
for its seals; only the exit no longer waits for a close that never ends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

_STOP = None


class DaemonPool:
    """Runs `submit`ted calls on up to `workers` daemon threads named `{name}_N`, started as
    calls come while none is idle. A call's exceptions are its own business (a seal catches
    its own); one that escapes is logged and the thread goes on."""

    def __init__(self, workers: int, name: str) -> None:
        if workers < 1:
            raise ValueError(f"a pool needs at least one thread, not {workers}")
        self._workers = workers
        self._name = name
        self._calls: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._shut = False

    def submit(self, fn: Callable[..., object], /, *args: object) -> None:
        """Queue `fn(*args)`. Raises RuntimeError once shut down, or when no thread can be
        started and none is running (the caller keeps the work for later)."""
        with self._lock:
            if self._shut:
                raise RuntimeError("the pool is shut down")
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True
                )
                try:
                    thread.start()
                except RuntimeError:
                    # Refused, the call must not stay queued: the caller keeps its work and
                    # submits it again, and a thread started later would run it twice.
                    if not self._threads:
                        raise
                    # Else a running thread takes it when done.
                else:
                    self._threads.append(thread)
            # After the thread starts: it waits for the call (an idle one was taken above).
            self._calls.put(lambda: fn(*args))

    def shutdown(self, wait: bool = True) -> None:
        """No more calls; the queued ones still run. `wait`: until every thread has ended."""
        with self._lock:
            if not self._shut:
                self._shut = True
                for _ in self._threads:
                    self._calls.put(_STOP)
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()

    def _work(self) -> None:
        while True:
            call = self._calls.get()
            if call is _STOP:
                return
            try:
                call()
            except Exception as exc:  # ended, the thread would leave the queue to the others
                log.exception("pool_call_failed", pool=self._name, error=str(exc))
            self._idle.release()
