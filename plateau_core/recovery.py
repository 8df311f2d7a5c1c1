"""Startup recovery of one partition's folder against the manifest (run on acquire), and
the store-wide sweep of temp files in the folders no writer owns (run at serve start).

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
            if TEMP_MARKER in entry.name:
                entry.unlink(missing_ok=True)
                log.warning("temp_file_removed", topic=topic, partition=partition, path=str(entry))
            elif segment_start(entry.name) is not None and entry not in known:
                entry.unlink(missing_ok=True)
                log.warning(
                    "orphan_segment_removed",
                    topic=topic,
                    partition=partition,
                    start_offset=segment_start(entry.name),
                    path=str(entry),
                    reason="not in the manifest; its records are replayed from Kafka",
                )
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
                temp = TEMP_MARKER in entry.name
                entry.unlink(missing_ok=True)
                removed.append(entry)
                log.warning(
                    "temp_file_removed" if temp else "orphan_segment_removed",
                    topic=directory.parent.name,
                    partition=int(directory.name),
                    path=str(entry),
                    reason="left by an interrupted seal or consolidation"
                    if temp
                    else "at or past the watermark, not in the manifest: never acknowledged",
                    found_by="start sweep",
                )
        finally:
            lock.release()
    return removed


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
