"""A store task that runs passes on a daemon thread of its own (retention, consolidation):
started once, stopped by setting an event its loop waits on."""

from __future__ import annotations

import threading


class BackgroundTask:
    """`start(interval_s)` runs `_loop(interval_s)` on a daemon thread named `thread_name`;
    the loop returns once `_stop` is set, which `stop()` does and then waits for."""

    thread_name = "background"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, interval_s: float = 30.0) -> None:
        """Run a pass every `interval_s` on a daemon thread until `stop()`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(interval_s,), name=self.thread_name, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait (up to 30 s) for the pass it is in to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self, interval_s: float) -> None:
        raise NotImplementedError
