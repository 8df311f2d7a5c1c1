"""A byte rate that background work keeps to on average (consolidation), so that it shares
the disk and the cores with ingestion instead of taking them in bursts."""

from __future__ import annotations

import time
from collections.abc import Callable

from plateau_core.errors import InvalidInputError

# Waits up to the given seconds; True: stop now (as a stop event's `wait` says once it is set).
Wait = Callable[[float], bool]


class Pace:
    """Work of `n` bytes starts no earlier than `n / rate` seconds after the work before it
    started: bytes over time stay at most the rate, one piece at a time ahead of it. A
    rate of None lets everything start at once."""

    def __init__(
        self,
        bytes_per_s: int | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if bytes_per_s is not None and bytes_per_s <= 0:
            raise InvalidInputError(f"a pace needs a positive rate, got {bytes_per_s}")
        self.bytes_per_s = bytes_per_s
        self._clock = clock
        self._free_at = float("-inf")
        self.waited_s = 0.0  # in all, for the metrics

    def take(self, nbytes: int, stopped: Wait) -> bool:
        """Wait until `nbytes` of work may start, then count it. Returns False, counting
        nothing, when `stopped` says the wait was cut short."""
        if self.bytes_per_s is None:
            return not stopped(0.0)
        now = self._clock()
        delay = self._free_at - now
        if delay > 0:
            if stopped(delay):
                return False
            self.waited_s += delay
            now = self._clock()
        self._free_at = max(self._free_at, now) + nbytes / self.bytes_per_s
        return True
