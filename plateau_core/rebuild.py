"""Rebuilding a lost or corrupted manifest from the segment files (`plateau rebuild-manifest`).

The segment files carry everything a sealed segment's row holds: offsets, times, schema;
checksums are computed again from the files. What only the manifest knew cannot come back:
see RebuildReport.notes. Each partition folder is read by `rebuild_partition`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import structlog

from plateau_core.errors import InvalidInputError, PartitionLockedError
from plateau_core.manifest import Manifest, SegmentState, sqlite_url
from plateau_core.manifest.identity import read_store_id_file, write_store_id_file
from plateau_core.names import MANIFEST_FILE, REBUILD_MARKER, fsync_path, validate_topic
from plateau_core.partition_lock import PartitionLock
from plateau_core.quarantine import withhold_rollups
from plateau_core.rebuild_partition import PartitionRebuild
from plateau_core.rebuild_report import NOTES, RebuildReport, RebuiltPartition, SkippedFile
from plateau_core.rebuild_target import (
    RebuildRefusedError,
    clear_manifest,
    interrupted_into,
    write_marker,
)
from plateau_core.rollup import rollup_base

__all__ = [
    "NOTES",
    "RebuildRefusedError",
    "RebuildReport",
    "RebuiltPartition",
    "SkippedFile",
    "rebuild_manifest",
]

log = structlog.get_logger(__name__)


def rebuild_manifest(data_dir: str | Path, manifest_url: str | None = None) -> RebuildReport:
    """Replace the manifest of `data_dir` with one rebuilt from its segment files.

    Refused while any partition lock is held (serve running). The old SQLite files are
    renamed to `*.broken-{UTC time}`, not deleted. Each partition's files are read and
    validated in offset order; good ones are recorded as sealed segments. A file that cannot
    be read, or that overlaps the one before it, is kept and recorded as quarantined, so it is
    reported and never served nor removed; one at the end of its partition is renamed aside
    instead (its offsets are above the watermark, and Kafka's replay would write a segment
    under its name).

    Until the last file is recorded, `manifest.rebuilding` in data_dir marks the manifest
    incomplete and every opener refuses it; run again after an interruption, the rebuild
    starts over (on a database server, dropping the tables the interrupted one filled).
    The store keeps its id, read from the `store-id` file in data_dir.

    Args:
        data_dir: The data folder whose `topics/` are read.
        manifest_url: The manifest to fill (default: SQLite at `{data_dir}/manifest.db`);
            a server database must hold no manifest yet.

    Returns:
        What was recorded, quarantined, retired or set aside per partition, and what could
        not be rebuilt (`notes`); `lines()` is the text for people.

    Raises:
        RebuildRefusedError: There is no data folder, a partition's writer lock is held
            (serve running), the server database already holds a manifest, or the name an
            SQLite file would be moved aside to is taken (run again a second later).
    """
    root = Path(data_dir).expanduser().resolve()
    if not root.is_dir():
        raise RebuildRefusedError(f"there is no data folder at {root}; nothing to rebuild")
    url = manifest_url or sqlite_url(root / MANIFEST_FILE)
    report = RebuildReport(data_dir=str(root), manifest_url=url)
    folders = _partition_folders(root, report)
    marker = root / REBUILD_MARKER
    locks = _lock_all(folders)
    try:
        report.moved_aside = clear_manifest(url, interrupted=interrupted_into(marker, url))
        write_marker(marker, url)
        manifest = Manifest(url)
        try:
            # The store stays the one its streams' checkpoints name; a folder from before
            # store ids gets a new one.
            kept = read_store_id_file(root)
            if kept is None:
                write_store_id_file(root, manifest.store_id())
            else:
                manifest.adopt_store_id(kept)
            report.store_id = manifest.store_id()
            # A topic sorts before its roll-up topics (its name is their prefix): each raw
            # partition's watermark is known when its roll-up partitions are rebuilt.
            watermarks: dict[tuple[str, int], int | None] = {}
            unread: list[tuple[str, int, str]] = []
            for topic, partition, folder in folders:
                base = rollup_base(topic)
                rebuilt = PartitionRebuild(root, manifest, topic, partition, report)
                if base is not None:
                    rebuilt.raw_watermark = watermarks.get((base, partition))
                rebuilt.run(folder)
                watermarks[(topic, partition)] = rebuilt.watermark
                unread += [(topic, partition, path) for path in rebuilt.unread]
            _withhold_rollups(manifest, report, unread)
            # The old counter is gone: ids from the clock's microseconds are above any a
            # counter from 0 reached, and above those of an earlier rebuild.
            manifest.skip_producer_ids(time.time_ns() // 1000)
        finally:
            manifest.close()
        marker.unlink()
        fsync_path(root)
    finally:
        for lock in locks:
            lock.release()
    log.info(
        "manifest_rebuilt",
        data_dir=str(root),
        segments=report.segments,
        partitions=len(report.partitions),
        quarantined=len(report.quarantined),
        retired=len(report.retired),
        set_aside=len(report.set_aside),
    )
    return report


def _withhold_rollups(
    manifest: Manifest, report: RebuildReport, unread: list[tuple[str, int, str]]
) -> None:
    """Quarantine the roll-up rows of the raw files quarantined with records no segment
    reads, as quarantining a damaged segment does: a roll-up counts what the raw topic
    reads. After every partition is recorded: a roll-up topic is rebuilt after its raw one."""
    for topic, partition, path in unread:
        quarantined = manifest.segments(
            topic, partitions=[partition], states=(SegmentState.QUARANTINED,)
        )
        for raw in (s for s in quarantined if s.path == path):
            withheld = withhold_rollups(manifest, raw)
            for rolled in manifest.segments_by_id([r.id for r in withheld]):
                report.quarantined.append(
                    SkippedFile(
                        rolled.topic,
                        rolled.partition,
                        rolled.path,
                        rolled.start_offset,
                        rolled.problem or "",
                    )
                )
                # Counted as readable when its partition was recorded: no longer.
                report.partitions = [
                    replace(
                        p,
                        segments=p.segments - 1,
                        records=p.records - rolled.record_count,
                        bytes=p.bytes - rolled.size_bytes,
                    )
                    if (p.topic, p.partition) == (rolled.topic, rolled.partition)
                    else p
                    for p in report.partitions
                ]


def _partition_folders(root: Path, report: RebuildReport) -> list[tuple[str, int, Path]]:
    topics = root / "topics"
    found: list[tuple[str, int, Path]] = []
    if not topics.is_dir():
        return found
    for topic_dir in sorted(p for p in topics.iterdir() if p.is_dir()):
        try:
            topic = validate_topic(topic_dir.name)
        except InvalidInputError:
            report.ignored.append(topic_dir.relative_to(root).as_posix())
            continue
        for folder in sorted(p for p in topic_dir.iterdir() if p.is_dir()):
            if not folder.name.isdigit():
                report.ignored.append(folder.relative_to(root).as_posix())
                continue
            found.append((topic, int(folder.name), folder))
    return sorted(found, key=lambda f: (f[0], f[1]))


def _lock_all(folders: list[tuple[str, int, Path]]) -> list[PartitionLock]:
    """Every partition's writer lock, held for the whole rebuild: a serve starting meanwhile
    would otherwise recover a partition against a half-built manifest and delete its files."""
    locks: list[PartitionLock] = []
    try:
        for topic, partition, folder in folders:
            try:
                locks.append(PartitionLock.acquire(folder, timeout_s=0))
            except PartitionLockedError:
                raise RebuildRefusedError(
                    f"{topic}[{partition}] is locked by a writer: plateau serve appears to be "
                    "running on this data_dir; stop it, then run rebuild-manifest again"
                ) from None
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return locks
