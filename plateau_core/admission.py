"""Whether the writer takes a group of appends now: offset order, the disk floor, busy
partitions and the memory budget, all checked before anything changes."""

from __future__ import annotations

from collections.abc import Sequence

from plateau_core.disk_floor import DiskFloor
from plateau_core.errors import BackpressureError
from plateau_core.slog import Append, Prepared, SegmentLog, check_order


def admit(
    appends: Sequence[Append],
    slogs: list[SegmentLog],
    prepared: list[list[Prepared]],
    nbytes: int,
    *,
    disk: DiskFloor | None,
    held: int,
    budget: int,
) -> BackpressureError | None:
    """Raise for appends out of offset order, a disk under its floor or a busy partition;
    return the refusal when `nbytes` more would overrun the memory budget (`held`: bytes
    buffered or being written), so the caller can start seals before raising it. Changes
    nothing but the partitions' note of the size refused, which `Writer.accepting` reads.
    `disk` None: the disk floor does not apply (a journal's replay, which frees the journal's
    space as it seals)."""
    check_order(appends, slogs, prepared)
    if nbytes == 0:
        return None  # a watermark move or a producer note: nothing to buffer
    landing = [s for s, batches in zip(slogs, prepared, strict=True) if batches]
    if disk is not None:
        disk.check(landing[0].topic, landing[0].partition)
    for slog in landing:
        busy = slog.busy_reason()
        if busy is not None:
            raise BackpressureError(slog.topic, slog.partition, "partition_busy", busy)
    refused = held > 0 and held + nbytes > budget
    for slog in landing:
        slog.refused_nbytes = nbytes if refused else 0
    if not refused:
        return None
    return BackpressureError(
        landing[0].topic,
        landing[0].partition,
        "memory_budget",
        f"{held} bytes buffered or being written, budget {budget}, batch {nbytes}",
    )
