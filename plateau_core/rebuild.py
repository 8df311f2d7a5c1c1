"""Rebuilding a lost or corrupted manifest from the segment files (`plateau rebuild-manifest`).

The segment files carry everything a sealed segment's row holds: offsets, times, schema;
checksums are computed again from the files. What only the manifest knew cannot come back:
see RebuildReport.notes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import structlog

from plateau_core.errors import InvalidInputError, PartitionLockedError
from plateau_core.manifest import Manifest, sqlite_url
from plateau_core.manifest.identity import read_store_id_file, write_store_id_file
from plateau_core.manifest.urls import shown_url
from plateau_core.names import (
    MANIFEST_FILE,
    REBUILD_MARKER,
    TEMP_MARKER,
    consolidated_name,
    fsync_path,
    segment_span,
    validate_topic,
)
from plateau_core.partition_lock import PartitionLock
from plateau_core.policies import IndexPolicy
from plateau_core.rebuild_target import (
    RebuildRefusedError,
    clear_manifest,
    interrupted_into,
    write_marker,
)
from plateau_core.rollup import rollup_base
from plateau_core.schema import OFFSET
from plateau_core.segment_file import inspect_segment, open_segment, write_segment
from plateau_core.segment_stats import SegmentStats
from plateau_core.verify import SET_ASIDE_MARKER

log = structlog.get_logger(__name__)

NOTES = (
    "replication state is not in the segment files: every segment is recorded as sealed and "
    "replicated_offset starts at 0, so the next `plateau replicate` copies everything again "
    "(its Parquet files are rewritten under the same names)",
    "recorded gaps (offsets Kafka had deleted before plateau read them) are not in the files "
    "and are no longer listed",
    "source topic ids are not in the files: each partition records its Kafka topic's id "
    "when next assigned, so a source topic deleted and created again before then is not "
    "said",
    "each watermark is the end of the partition's last readable segment: records after it "
    "that were skipped or sent to the dead-letter topic are read from Kafka again and "
    "handled again by their mapping's on_error",
    "idempotent producers' last batches are not in the files: a producer's retry of a batch "
    "acknowledged before the rebuild is stored again; producer ids start above any handed "
    "out before (from the clock), so none is given twice",
    "topics created through the Kafka API (CreateTopics, auto_create_topics) are not listed "
    "as produced topics: their records are read as before, and producers need the topic "
    "created again (or in the config) to write more",
)


@dataclass(frozen=True)
class RebuiltPartition:
    """What was recorded of one partition, and its watermark now."""

    topic: str
    partition: int
    segments: int
    records: int
    bytes: int
    watermark: int | None


@dataclass(frozen=True)
class SkippedFile:
    """A segment file not recorded as readable, and why."""

    topic: str
    partition: int
    path: str  # relative to data_dir, where it is now
    start_offset: int
    problem: str


@dataclass
class RebuildReport:
    """What `rebuild_manifest` recorded, skipped and moved, and what it could not rebuild."""

    data_dir: str
    manifest_url: str
    store_id: str = ""
    moved_aside: list[str] = field(default_factory=list)
    partitions: list[RebuiltPartition] = field(default_factory=list)
    quarantined: list[SkippedFile] = field(default_factory=list)
    retired: list[SkippedFile] = field(default_factory=list)
    set_aside: list[SkippedFile] = field(default_factory=list)
    temp_removed: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=lambda: list(NOTES))

    @property
    def segments(self) -> int:
        """Segments recorded as readable."""
        return sum(p.segments for p in self.partitions)

    def lines(self) -> list[str]:
        """The report for people."""
        # Printed for a person: the URL's password stays out of it.
        shown = shown_url(self.manifest_url)
        out = [f"rebuilt the manifest of {self.data_dir} ({shown}), store {self.store_id}"]
        out += [f"  moved aside: {path}" for path in self.moved_aside]
        for p in self.partitions:
            out.append(
                f"  {p.topic}[{p.partition}]: {p.segments} segments, {p.records:,} records, "
                f"{p.bytes:,} bytes, watermark {p.watermark}"
            )
        for skipped in self.quarantined:
            out.append(f"  QUARANTINED {skipped.path}: {skipped.problem}")
        for skipped in self.retired:
            out.append(f"  retired {skipped.path}: {skipped.problem}")
        for skipped in self.set_aside:
            out.append(
                f"  SET ASIDE {skipped.path}: {skipped.problem}; its records from offset "
                f"{skipped.start_offset} are read from Kafka again"
            )
        out += [f"  removed temp file {path}" for path in self.temp_removed]
        out += [f"  ignored {path}: not a topic/partition folder" for path in self.ignored]
        out.append(f"{self.segments} segments recorded. Not rebuilt:")
        out += [f"  - {note}" for note in self.notes]
        return out


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
            for topic, partition, folder in folders:
                base = rollup_base(topic)
                rebuilt = _PartitionRebuild(root, manifest, topic, partition, report)
                if base is not None:
                    rebuilt.raw_watermark = watermarks.get((base, partition))
                rebuilt.run(folder)
                watermarks[(topic, partition)] = rebuilt.watermark
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


@dataclass
class _PartitionRebuild:
    """One partition folder, recorded into the new manifest in offset order."""

    root: Path
    manifest: Manifest
    topic: str
    partition: int
    report: RebuildReport
    watermark: int | None = None
    # The span of the last consolidated segment recorded: files inside it are its inputs,
    # left for the deletion grace.
    consolidated: tuple[int, int] | None = None
    segments: int = 0
    records: int = 0
    bytes: int = 0
    # Of a roll-up partition: its raw partition's rebuilt watermark. A roll-up segment at or
    # past it rolled up raw records read from Kafka again (their segment was set aside):
    # recorded, the new seal's roll-up overlapped it, and the seal wrote over its file.
    raw_watermark: int | None = None

    def run(self, folder: Path) -> None:
        unreadable: list[tuple[int, Path, str]] = []  # since the last good segment
        for start, listed in self.segment_files(folder):
            path, stats, schema, problem = self.read(listed, start)
            if stats is None or schema is None:
                unreadable.append((start, path, problem or "unreadable"))
            elif self.raw_watermark is not None and stats.start_offset >= self.raw_watermark:
                self.set_aside(
                    path,
                    start,
                    f"rolls up raw records from offset {start}, past the raw partition's "
                    f"watermark {self.raw_watermark}",
                    reason="its raw records are read from Kafka again and rolled up again",
                )
            elif self.replaced(stats):
                self.retire(path, stats)
            elif self.watermark is not None and stats.start_offset < self.watermark:
                problem = (
                    f"offsets [{stats.start_offset}, {stats.end_offset}) overlap the segment "
                    f"before it, which ends at {self.watermark}"
                )
                self.quarantine(path, start, stats.end_offset, problem, stats)
            else:
                for bad_start, bad_path, bad_problem in unreadable:
                    # Bounded by this readable segment: its offsets lie below this one's start.
                    end = max(bad_start, stats.start_offset)
                    self.quarantine(bad_path, bad_start, end, bad_problem, None)
                unreadable = []
                self.record(path, stats, schema)
        for bad_start, bad_path, bad_problem in unreadable:
            if self.watermark is not None and bad_start < self.watermark:
                self.quarantine(bad_path, bad_start, bad_start, bad_problem, None)
            else:
                self.set_aside(bad_path, bad_start, bad_problem)
        self.report.partitions.append(
            RebuiltPartition(
                self.topic, self.partition, self.segments, self.records, self.bytes, self.watermark
            )
        )
        log.info(
            "partition_rebuilt",
            topic=self.topic,
            partition=self.partition,
            segments=self.segments,
            records=self.records,
            next_offset=self.watermark,
        )

    def read(
        self, path: Path, start: int
    ) -> tuple[Path, SegmentStats | None, pa.Schema | None, str | None]:
        """The file's stats and schema, or its problem. A consolidated roll-up file reaching
        past its raw partition's watermark is replaced by a file of its rows below it (the
        rest are rolled up again with the raw records read again): recorded whole, the
        replayed seal's roll-up overlapped it, and every seal of the partition failed."""
        stats, schema, problem = _read(path, start)
        limit = self.raw_watermark
        if stats is None or limit is None or not stats.start_offset < limit < stats.end_offset:
            return path, stats, schema, problem
        table = open_segment(path).read_all()
        kept = table.filter(pc.less(table.column(OFFSET), limit))
        end = pc.max(kept.column(OFFSET)).as_py() + 1
        trimmed, _ = write_segment(
            path.parent, kept, index=IndexPolicy(), name=consolidated_name(start, end)
        )
        self.set_aside(
            path,
            start,
            f"rolls up raw records up to offset {stats.end_offset}, past the raw partition's "
            f"watermark {limit}; its rows below it are in {trimmed.name}",
            reason="its raw records from the watermark are read from Kafka again and rolled "
            "up again",
        )
        stats, schema, problem = _read(trimmed, start)
        return trimmed, stats, schema, problem

    def segment_files(self, folder: Path) -> list[tuple[int, Path]]:
        """The folder's segment files by first offset (temp files removed)."""
        files: list[tuple[int, int, Path]] = []
        for entry in sorted(folder.iterdir()):
            if TEMP_MARKER in entry.name:
                entry.unlink(missing_ok=True)
                self.report.temp_removed.append(entry.relative_to(self.root).as_posix())
                log.warning(
                    "temp_file_removed", topic=self.topic, partition=self.partition, path=str(entry)
                )
            elif (span := segment_span(entry.name)) is not None:
                # Of files starting at one offset, the widest first: a consolidated segment
                # before the inputs it replaced, which may still wait out the deletion grace.
                files.append((span[0], -(span[1] if span[1] is not None else -1), entry))
        return [(start, path) for start, _, path in sorted(files)]

    def record(self, path: Path, stats: SegmentStats, schema: pa.Schema) -> None:
        # The file's own name: a consolidated segment's is its span, not its start.
        relative = path.relative_to(self.root).as_posix()
        self.manifest.commit_segment(self.topic, self.partition, stats, relative, schema)
        self.watermark = stats.end_offset
        span = segment_span(path.name)
        if span is not None and span[1] is not None:
            self.consolidated = (stats.start_offset, stats.end_offset)
        self.segments += 1
        self.records += stats.record_count
        self.bytes += stats.size_bytes
        log.info(
            "segment_recorded",
            topic=self.topic,
            partition=self.partition,
            start_offset=stats.start_offset,
            end_offset=stats.end_offset,
            records=stats.record_count,
            path=relative,
        )

    def replaced(self, stats: SegmentStats) -> bool:
        """Whether the segment's offsets lie inside the consolidated segment recorded last."""
        return self.consolidated is not None and (
            self.consolidated[0] <= stats.start_offset and stats.end_offset <= self.consolidated[1]
        )

    def retire(self, path: Path, stats: SegmentStats) -> None:
        relative = path.relative_to(self.root).as_posix()
        self.manifest.record_retired(
            self.topic, self.partition, relative, stats, path.stat().st_size
        )
        assert self.consolidated is not None
        start, end = self.consolidated
        problem = f"its offsets are in the consolidated segment [{start}, {end})"
        self.report.retired.append(
            SkippedFile(self.topic, self.partition, relative, stats.start_offset, problem)
        )
        log.info(
            "segment_retired",
            topic=self.topic,
            partition=self.partition,
            start_offset=stats.start_offset,
            end_offset=stats.end_offset,
            path=relative,
            reason=problem,
        )

    def quarantine(
        self, path: Path, start: int, end: int, problem: str, stats: SegmentStats | None
    ) -> None:
        relative = path.relative_to(self.root).as_posix()
        self.manifest.record_quarantined(
            self.topic,
            self.partition,
            relative,
            problem,
            start_offset=start,
            end_offset=end,
            size_bytes=path.stat().st_size,
            stats=stats,
        )
        self.report.quarantined.append(
            SkippedFile(self.topic, self.partition, relative, start, problem)
        )
        log.error(
            "segment_quarantined",
            topic=self.topic,
            partition=self.partition,
            start_offset=start,
            end_offset=end,
            path=relative,
            problem=problem,
            found_by="rebuild",
        )

    def set_aside(
        self,
        path: Path,
        start: int,
        problem: str,
        reason: str = "unreadable and after the last readable segment: its records are read "
        "from Kafka again",
    ) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = path.with_name(f"{path.name}{SET_ASIDE_MARKER}{stamp}")
        path.rename(target)
        relative = target.relative_to(self.root).as_posix()
        self.report.set_aside.append(
            SkippedFile(self.topic, self.partition, relative, start, problem)
        )
        log.error(
            "segment_set_aside",
            topic=self.topic,
            partition=self.partition,
            start_offset=start,
            path=relative,
            problem=problem,
            reason=reason,
        )


def _read(path: Path, start: int) -> tuple[SegmentStats | None, pa.Schema | None, str | None]:
    try:
        stats = inspect_segment(path)
        schema = open_segment(path).schema
    except (OSError, pa.ArrowException, InvalidInputError) as exc:
        return None, None, f"unreadable: {exc}"
    if stats.start_offset != start:
        return None, None, f"holds offsets from {stats.start_offset}, its name says {start}"
    return stats, schema, None
