"""One partition folder of `plateau rebuild-manifest`: its segment files read in offset order
and recorded, retired, quarantined or set aside."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import structlog

from plateau_core.errors import InvalidInputError
from plateau_core.manifest import Manifest
from plateau_core.names import TEMP_MARKER, consolidated_name, segment_span
from plateau_core.policies import IndexPolicy
from plateau_core.rebuild_report import RebuildReport, RebuiltPartition, SkippedFile
from plateau_core.schema import OFFSET
from plateau_core.segment_file import inspect_segment, open_segment, write_segment
from plateau_core.segment_stats import SegmentStats
from plateau_core.verify import SET_ASIDE_MARKER

log = structlog.get_logger(__name__)


@dataclass
class PartitionRebuild:
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
    # Quarantined files whose records no recorded segment reads (by path): their roll-up
    # rows are withheld once the roll-up partitions are recorded too.
    unread: list[str] = field(default_factory=list)

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
                    # One starting inside a recorded segment (an input left beside its
                    # consolidated segment), or where this one starts, holds records read.
                    if bad_start < end and (self.watermark is None or self.watermark <= bad_start):
                        self.unread.append(bad_path.relative_to(self.root).as_posix())
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
