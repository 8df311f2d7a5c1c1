"""Startup recovery of one partition's folder against the manifest (run on acquire), and
the store-wide sweep of the folders no writer owns (run at serve start: temp files, and
segment files at or past the watermark).

- temp files of interrupted seals are removed;
- segment files the manifest does not know are removed: their records were never
  acknowledged, so the consumer replays them from Kafka;
- a manifest row whose file is missing, unreadable or disagrees with it is quarantined:
  reported loudly and excluded from reads, never served silently. The check is the cheap
  one (size, the head and tail checksums, the footer and the offset column); serve checks
  every batch's checksum once at start (plateau_core.verify).
"""

from __future__ import annotations

from pathlib import Path

import structlog

from plateau_core.errors import PartitionLockedError
from plateau_core.handle import StoreHandle
from plateau_core.manifest import READABLE_STATES, SegmentState
from plateau_core.names import TEMP_MARKER, partition_dir, segment_start
from plateau_core.partition_lock import PartitionLock
from plateau_core.quarantine import quarantine
from plateau_core.verify import check_segment

log = structlog.get_logger(__name__)


def recover_partition(store: StoreHandle, topic: str, partition: int) -> int | None:
    """Make the folder agree with the manifest; return the partition's watermark."""
    directory = partition_dir(store.data_dir, topic, partition)
    rows = store.manifest.segments(topic, partitions=[partition], states=tuple(SegmentState))
    known = {store.data_dir / row.path for row in rows}
    if directory.exists():
        for entry in sorted(directory.iterdir()):
            if TEMP_MARKER in entry.name or (
                segment_start(entry.name) is not None and entry not in known
            ):
                _remove(entry, topic, partition, found_by="acquire")
    for row in rows:
        if row.state not in READABLE_STATES:
            continue
        problem = check_segment(store.data_dir / row.path, row, batches=False)
        if problem is not None:
            quarantine(store.manifest, row, problem, found_by="acquire")
    return store.manifest.watermark(topic, partition)


def sweep_unowned(store: StoreHandle) -> list[Path]:
    """Clean every partition folder that no writer owns now, as acquiring it would: remove
    the temp files of interrupted seals and consolidations, and the segment files at or
    past the partition's watermark (a seal renamed into place whose manifest commit never
    came). Returns the files removed.

    Acquiring a partition cleans its own folder (`recover_partition`). This reaches the
    folders that may never be acquired again: a topic no longer in the config or dropped, a
    produced topic nothing writes to any more. It reads one watermark per folder, not the
    manifest's rows: every recorded segment starts below its partition's watermark. An
    interrupted consolidation's output (below it) is left to acquiring. A folder whose lock
    is held (a writer, a consolidation or a rebuild, in this process or another) is left to
    its holder.
    """
    removed: list[Path] = []
    topics = store.data_dir / "topics"
    if not topics.is_dir():
        return removed
    for directory in sorted(p for p in topics.glob("*/*") if p.is_dir()):
        if not directory.name.isdigit() or not _stray(store, directory):
            continue
        try:
            lock = PartitionLock.acquire(directory, timeout_s=0)
        except PartitionLockedError:
            continue
        try:
            # Again under the lock: a writer may have sealed since the look above.
            for entry in _stray(store, directory):
                _remove(entry, directory.parent.name, int(directory.name), found_by="start sweep")
                removed.append(entry)
        finally:
            lock.release()
    return removed


def _remove(entry: Path, topic: str, partition: int, *, found_by: str) -> None:
    """Remove a temp file or an orphan segment file of a partition folder, logged."""
    entry.unlink(missing_ok=True)
    if TEMP_MARKER in entry.name:
        log.warning(
            "temp_file_removed",
            topic=topic,
            partition=partition,
            path=str(entry),
            reason="left by an interrupted seal or consolidation",
            found_by=found_by,
        )
        return
    log.warning(
        "orphan_segment_removed",
        topic=topic,
        partition=partition,
        start_offset=segment_start(entry.name),
        path=str(entry),
        reason="not in the manifest: its records were never acknowledged (their source, "
        "Kafka or a producer, sends them again)",
        found_by=found_by,
    )


def _stray(store: StoreHandle, directory: Path) -> list[Path]:
    """The temp files of a partition folder and its segment files at or past the watermark."""
    temps: list[Path] = []
    segments: list[tuple[int, Path]] = []
    for entry in sorted(directory.iterdir()):
        start = segment_start(entry.name)
        if TEMP_MARKER in entry.name:
            temps.append(entry)
        elif start is not None:
            segments.append((start, entry))
    if not segments:
        return temps
    watermark = store.manifest.watermark(directory.parent.name, int(directory.name))
    return temps + [entry for start, entry in segments if watermark is None or start >= watermark]
