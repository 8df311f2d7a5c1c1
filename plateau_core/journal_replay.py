"""Replaying a journal after a crash: the groups it holds that the manifest does not are
appended to the writer again, with the offsets and producer batches they had, and sealed
before anything new is taken. A group sealed already (every partition's watermark is past
it) is passed over, so a replay cut short by another crash is simply done again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from plateau_core.errors import BackpressureError
from plateau_core.journal import Journal
from plateau_core.journal_codec import JournalCorruptError
from plateau_core.journal_files import SUFFIX
from plateau_core.lazy import span
from plateau_core.listener import TopicPartition
from plateau_core.slog import Append
from plateau_core.writer import Writer

log = structlog.get_logger(__name__)


@dataclass
class _Replayed:
    start_offset: int
    end_offset: int
    records: int = 0
    groups: int = 0


def replay(
    writer: Writer,
    acquire: Callable[[str, int], object],
    *,
    timeout_s: float = 300.0,
    journal: Journal | None = None,
) -> int:
    """Append the journal's unsealed groups to `writer` again and seal them; returns how many
    records that was. `acquire(topic, partition)` makes the writer own a partition a group
    names that it does not own yet. Raises JournalCorruptError when the journal cannot be
    read back whole, or a group overlaps what is sealed (then the manifest and the journal
    disagree, and neither is changed), FlushTimeoutError when the replayed records are not
    sealed within `timeout_s` (the journal keeps them for the next replay), and what
    `acquire` raises (PartitionLockedError). `journal`: another writer's journal to replay
    (see `replay_left`), instead of `writer`'s own."""
    journal = journal if journal is not None else writer.journal
    if journal is None:
        return 0
    owned = set(writer.owned())
    replayed: dict[TopicPartition, _Replayed] = {}
    started = time.monotonic()
    for group in journal.recovered():
        kept: list[Append] = []
        for append in group.appends:
            key = (append.topic, append.partition)
            if key not in owned:
                acquire(*key)
                owned.add(key)
            unsealed = _unsealed(append, writer.next_offset(*key), group.seq)
            if unsealed is None:
                continue
            rest, span = unsealed
            kept.append(rest)
            found = replayed.setdefault(key, _Replayed(*span))
            found.end_offset = span[1]
            found.records += sum(b.num_rows for b in rest.batches)
            found.groups += 1
        if kept:
            _append(writer, kept, timeout_s)
    writer.flush(timeout_s=timeout_s)
    journal.forget_recovered()
    for (topic, partition), found in sorted(replayed.items()):
        log.info(
            "journal_replayed",
            topic=topic,
            partition=partition,
            start_offset=found.start_offset,
            end_offset=found.end_offset,
            records=found.records,
            groups=found.groups,
        )
    total = sum(r.records for r in replayed.values())
    if replayed:
        log.info(
            "journal_recovered",
            partitions=len(replayed),
            records=total,
            seconds=round(time.monotonic() - started, 3),
        )
    return total


def replay_left(
    writer: Writer,
    acquire: Callable[[str, int], object],
    directory: Path,
    *,
    timeout_s: float = 300.0,
) -> int:
    """Replay, through a writer without a journal, what a journaled writer left in
    `directory` (the Kafka API switched from `durability: journal` to `segment` between a
    crash and the restart): acknowledged records, which new appends would otherwise take
    the offsets of. Returns how many records that was (0 when nothing is left)."""
    if not directory.is_dir() or not any(directory.glob(f"*{SUFFIX}")):
        return 0
    journal = Journal(directory, fsync=writer.policy.fsync)
    try:
        return replay(writer, acquire, timeout_s=timeout_s, journal=journal)
    finally:
        # It wrote no file: only the replay deletes the ones it found, once all is sealed.
        journal.close(everything_sealed=True)


def _unsealed(append: Append, next_offset: int, seq: int) -> tuple[Append, tuple[int, int]] | None:
    """What of `append` is not sealed yet, and the [start, end) of offsets it covers; None
    when all of it is."""
    spans = [found for b in append.batches if (found := span(b)) is not None]
    first = spans[0][0] if spans else None
    end = spans[-1][1] + 1 if spans else 0
    if append.advance_to is not None:
        end = max(end, append.advance_to)
    if end <= next_offset:
        return None
    if spans and spans[-1][1] < next_offset:
        # Its rows are sealed and its watermark move past them is not: a manifest rebuilt
        # from the segment files ends the watermark at the last row, and the records after
        # it (skipped, dead-lettered) are moved over again, with the producer's batch.
        return replace(append, batches=()), (next_offset, end)
    if first is not None and first < next_offset:
        raise JournalCorruptError(
            f"journal group {seq} holds {append.topic}[{append.partition}] offsets "
            f"{first}..{end - 1}, across its sealed watermark {next_offset}: the manifest and "
            "the journal disagree"
        )
    return append, ((first if first is not None else next_offset), end)


def _append(writer: Writer, appends: list[Append], timeout_s: float) -> None:
    try:
        writer.append_group(appends, journal=False)
    except BackpressureError:
        # More unsealed records than the memory budget holds at once: seal, then go on.
        writer.flush(timeout_s=timeout_s)
        writer.append_group(appends, journal=False)
