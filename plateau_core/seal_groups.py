"""Which partitions seal together: the groups a writer hands to its seal pool.

Partitions changed by one append_group are linked and always seal as one group (one
manifest transaction). With `seal_together`, every partition due at a moment joins one
group, and at most one such group is in flight: what becomes due meanwhile waits for it
and forms the next group, so group size grows with load (a group commit). A writer may
also hold the next group back for a moment after one finishes (`after`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from plateau_core.listener import TopicPartition
from plateau_core.slog import SealJob, SegmentLog

# Below this many bytes per file on average, a group's cost is mostly per file (measured:
# docs/benchmarks.md, the Kafka API), so holding the next group back pays.
HOLD_BELOW_BYTES = 256 * 1024


class Hold:
    """The moment after a group of small files sealed, while the next one waits for the
    producers it answered to send their next records: as many produce requests as went into
    that group, or until the hold runs out."""

    def __init__(self) -> None:
        self.until = 0.0
        self.pending = 0  # produce requests appended since the last group started
        self.answered = 0  # produce requests in the group in flight (or last sealed)
        self.replaced = 0  # produce requests appended since the hold began

    def started(self) -> None:
        """A group started: the requests appended so far are in it."""
        self.answered, self.pending = self.pending, 0

    def start(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds
        self.replaced = 0

    def arrived(self) -> None:
        """A produce request's records are all appended."""
        self.pending += 1
        self.replaced += 1

    def holding(self, now: float) -> bool:
        # Requests that came while the group was in flight are no replies to it: they were
        # sent before it answered, and wait in the next group whatever happens.
        return now < self.until and self.replaced < self.answered

    def wake_in(self, now: float) -> float | None:
        """Seconds until the hold runs out (None: it is not holding)."""
        return self.until - now if self.holding(now) else None


class SealGroups:
    def __init__(self, logs: Mapping[TopicPartition, SegmentLog], together: bool) -> None:
        self._logs = logs
        self.together = together
        self.in_flight = 0  # groups handed to the pool and not finished
        self._waiting: set[TopicPartition] = set()  # selected while a group was in flight
        self.hold = Hold()  # seal_together only

    @property
    def waiting(self) -> bool:
        """Partitions selected while a group was in flight or held wait for the next one."""
        return bool(self._waiting)

    def form(self, selected: Iterable[SegmentLog]) -> list[list[SegmentLog]]:
        """The groups to start now for `selected` and the partitions linked to them; a
        group with a member still sealing waits (its completion schedules again)."""
        if self.together:
            self._waiting.update(s.key for s in selected)
            if self.in_flight or self.hold.holding(time.monotonic()):
                return []
            selected = [self._logs[k] for k in self._waiting if k in self._logs]
            self._waiting = set()
        groups: list[list[SegmentLog]] = []
        seen: set[TopicPartition] = set()
        for slog in selected:
            if slog.key in seen:
                continue
            members = self._linked(slog)
            seen.update(m.key for m in members)
            if all(m.in_flight is None for m in members):
                groups.append(members)
        if self.together and len(groups) > 1:
            groups = [[m for group in groups for m in group]]
        if self.together and groups:
            self.hold.started()
        return groups

    def after(self, group: Sequence[SealJob], hold_s: float, took_s: float) -> None:
        """A group finished sealing: hold the next one back for as long as this one took
        (at most `hold_s`, less once the requests it waits for came in), when its files were
        small. A small file costs about the same to write and record whatever it holds, so
        gathering what arrives meanwhile makes each cost count for more records; big files
        cost by their bytes, and waiting only adds latency."""
        if not self.together or hold_s <= 0 or not group:
            return
        if sum(job.nbytes for job in group) / len(group) < HOLD_BELOW_BYTES:
            self.hold.start(min(hold_s, took_s))

    def wait_s(self, tick_s: float) -> float:
        """How long the ticker may sleep: until the hold may end if that comes first."""
        held = self.hold.wake_in(time.monotonic())
        return tick_s if held is None else min(tick_s, held)

    def _linked(self, slog: SegmentLog) -> list[SegmentLog]:
        members = {slog.key: slog}
        todo = list(slog.links)
        while todo:
            other = self._logs.get(todo.pop())
            if other is not None and other.key not in members:
                members[other.key] = other
                todo.extend(other.links)
        return list(members.values())


def relieve_pressure(logs: Iterable[SegmentLog], buffered: int, budget: int) -> list[SegmentLog]:
    """Under memory pressure: the biggest idle buffers to seal now, until a quarter of the
    budget is left buffered, instead of waiting for their roll."""
    now = time.monotonic()
    idle = sorted((s for s in logs if s.can_seal(now)), key=lambda s: -s.nbytes)
    chosen: list[SegmentLog] = []
    left = buffered
    for slog in idle:
        chosen.append(slog)
        left -= slog.nbytes
        if left < budget // 4:
            break
    return chosen
