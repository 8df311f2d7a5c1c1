"""Checking segment files against the manifest: one segment, or the whole store.

`check_segment` is the single definition of "this file is what its row says": recovery runs
it without the per-batch checksums (cheap), `verify_store` and `plateau verify` with them,
and `deep=True` also decodes every batch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import structlog

import plateau_core.crc as crcs
from plateau_core.checksums import ChecksumFormatError
from plateau_core.errors import ManifestUnusableError
from plateau_core.handle import StoreHandle
from plateau_core.manifest import READABLE_STATES, SegmentRecord, SegmentState
from plateau_core.names import TEMP_MARKER, segment_start
from plateau_core.quarantine import quarantine as quarantine_segment
from plateau_core.schema import OFFSET, TIMESTAMP, fingerprint
from plateau_core.segment_file import open_segment, quick_check, size_problem

log = structlog.get_logger(__name__)

# The suffix rebuild-manifest gives a file it could not record (see plateau_core.rebuild).
SET_ASIDE_MARKER = ".unreadable-"


def check_segment(
    path: Path, record: SegmentRecord, deep: bool = False, *, batches: bool = True
) -> str | None:
    """What is wrong with the segment file at `path` given its manifest row, or None.

    Checks the size, that the checksummed regions tile the file, the head and tail crcs and
    (with `batches`) every batch's crc, then the footer and offset column against the row.
    `deep` decodes every batch with full validation and compares offsets, row count, times
    and schema with the row. Rows recorded before checksums existed skip the crcs.
    """
    problem = size_problem(path, record.size_bytes)
    if problem is not None:
        return problem
    try:
        checksums = record.checksums
    except ChecksumFormatError as exc:
        return f"its recorded checksums are unreadable: {exc}"
    if checksums is not None:
        try:
            with pa.memory_map(str(path), "r") as source:
                data = crcs.file_buffer(source)
                check = crcs.file_problem if batches else crcs.ends_problem
                problem = check(data, checksums)
        except (OSError, pa.ArrowException) as exc:
            return f"unreadable: {exc}"
        if problem is not None:
            return problem
    problem = quick_check(path, record.stats)
    if problem is not None or not deep:
        return problem
    return _deep_check(path, record)


def _deep_check(path: Path, record: SegmentRecord) -> str | None:
    try:
        reader = open_segment(path)
        if fingerprint(reader.schema) != record.schema_fingerprint:
            return (
                f"schema fingerprint is {fingerprint(reader.schema)}, the manifest says "
                f"{record.schema_fingerprint}"
            )
        rows = 0
        previous: int | None = None
        time_min: int | None = None
        time_max: int | None = None
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            batch.validate(full=True)
            if batch.num_rows == 0:
                continue
            rows += batch.num_rows
            offsets = batch.column(OFFSET)
            first = offsets[0].as_py()
            if previous is not None and first < previous:
                return f"offsets go backwards at batch {i}"
            if (
                len(offsets) > 1
                and not pc.all(
                    pc.greater_equal(offsets.slice(1), offsets.slice(0, len(offsets) - 1))
                ).as_py()
            ):
                return f"offsets go backwards inside batch {i}"
            previous = offsets[len(offsets) - 1].as_py()
            bounds = pc.min_max(batch.column(TIMESTAMP).cast(pa.int64()))
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            time_min = low if time_min is None else min(time_min, low)
            time_max = high if time_max is None else max(time_max, high)
    except (OSError, pa.ArrowException) as exc:
        return f"does not decode: {exc}"
    if rows != record.record_count:
        return f"decodes to {rows} rows, the manifest says {record.record_count}"
    if (time_min, time_max) != (record.time_min, record.time_max):
        return (
            f"times span {time_min}..{time_max}, the manifest says "
            f"{record.time_min}..{record.time_max}"
        )
    return None


@dataclass(frozen=True)
class SegmentProblem:
    """A segment whose file disagrees with its row, and what is wrong."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    path: str
    problem: str
    quarantined: bool  # by this run (for `problems`) or before it (for `quarantined`)


@dataclass
class VerifyReport:
    """What `verify_store` found. `clean` when there is nothing to act on."""

    data_dir: str
    deep: bool
    segments: int = 0  # readable segments checked
    bytes: int = 0
    seconds: float = 0.0
    problems: list[SegmentProblem] = field(default_factory=list)
    quarantined: list[SegmentProblem] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    temp_files: list[str] = field(default_factory=list)
    set_aside: list[str] = field(default_factory=list)
    manifest_problems: list[str] = field(default_factory=list)

    @property
    def problem_count(self) -> int:
        """Everything listed that needs an operator's look."""
        return (
            len(self.problems)
            + len(self.quarantined)
            + len(self.orphans)
            + len(self.temp_files)
            + len(self.set_aside)
            + len(self.manifest_problems)
        )

    @property
    def clean(self) -> bool:
        """No problem of any kind."""
        return self.problem_count == 0

    def as_dict(self) -> dict[str, object]:
        """The report as plain data (for JSON), with `clean`."""
        return {**asdict(self), "clean": self.clean}

    def lines(self) -> list[str]:
        """The report for people."""
        kind = "deep" if self.deep else "checksum"
        out = [
            f"{self.data_dir}: {kind} check of {self.segments} segments, "
            f"{self.bytes:,} bytes in {self.seconds:.1f} s"
        ]
        for problem in self.manifest_problems:
            out.append(f"  manifest: {problem}")
        for found in self.problems:
            action = "quarantined now" if found.quarantined else "not quarantined"
            out.append(f"  BAD {_describe(found)}: {found.problem} ({action})")
        for found in self.quarantined:
            out.append(f"  QUARANTINED {_describe(found)}: {found.problem}")
        for path in self.orphans:
            out.append(f"  ORPHAN {path}: not in the manifest (removed on acquire)")
        for path in self.temp_files:
            out.append(
                f"  TEMP {path}: left by an interrupted seal (removed at serve start or on acquire)"
            )
        for path in self.set_aside:
            out.append(f"  SET ASIDE {path}: unreadable, kept by rebuild-manifest for inspection")
        out.append("clean" if self.clean else f"{self.problem_count} problem(s)")
        return out


def _describe(found: SegmentProblem) -> str:
    return (
        f"{found.path} ({found.topic}[{found.partition}] offsets "
        f"[{found.start_offset}, {found.end_offset}))"
    )


def verify_store(
    store: StoreHandle, *, deep: bool = False, quarantine: bool = False
) -> VerifyReport:
    """Check every readable segment of every topic against its row and checksums; list
    files the manifest does not know and rows already quarantined.

    With `quarantine`, a bad segment is moved to the quarantined state (excluded from reads,
    logged as `segment_quarantined`). Nothing is deleted: orphans and temp files are left to
    recovery, which removes them when their partition is acquired; serve's start also
    removes temp files, and orphans past their partition's watermark, where no writer owns
    the partition.

    Args:
        store: The store to check; it may be written meanwhile.
        deep: Also decode every batch and compare it with its row (see check_segment).
        quarantine: Quarantine the bad segments found.

    Returns:
        The report; what SQLite's integrity check finds in the manifest is listed in its
        `manifest_problems`, not raised.
    """
    report = VerifyReport(data_dir=str(store.data_dir), deep=deep)
    report.manifest_problems = store.manifest.integrity_check()
    return _check_files(store, report, quarantine=quarantine)


def _check_files(store: StoreHandle, report: VerifyReport, *, quarantine: bool) -> VerifyReport:
    """The file part of verify_store, filling `report`."""
    started = time.monotonic()
    # Files first, then rows: a segment sealed in between is then known, not an orphan.
    files = list(_partition_files(store.data_dir))
    rows = store.manifest.segments(states=tuple(SegmentState))
    known = {row.path for row in rows}
    for relative in files:
        name = relative.rsplit("/", 1)[-1]
        if relative not in known and not (store.data_dir / relative).exists():
            continue  # gone since listed: retention ended its grace, or a seal renamed it
        if TEMP_MARKER in name:
            report.temp_files.append(relative)
        elif SET_ASIDE_MARKER in name:
            report.set_aside.append(relative)
        elif segment_start(name) is not None and relative not in known:
            report.orphans.append(relative)
    for row in rows:
        if row.state is SegmentState.QUARANTINED:
            report.quarantined.append(_found(row, row.problem or "quarantined", quarantined=True))
            continue
        if row.state not in READABLE_STATES:
            continue
        problem = check_segment(store.segment_path(row), row, report.deep)
        report.segments += 1
        report.bytes += row.size_bytes
        if problem is None:
            continue
        if store.manifest.segment_state(row.id) not in READABLE_STATES:
            continue  # retention retired it while we looked: not a problem
        moved = quarantine and quarantine_segment(store.manifest, row, problem, found_by="verify")
        report.problems.append(_found(row, problem, quarantined=moved))
        if not moved:
            log.error(
                "segment_corrupt",
                topic=row.topic,
                partition=row.partition,
                start_offset=row.start_offset,
                end_offset=row.end_offset,
                path=row.path,
                problem=problem,
            )
    if report.orphans:
        # A seal or a consolidation renames its file before its transaction commits: one
        # still committing when the rows were listed is known by now, after the checks.
        known = {row.path for row in store.manifest.segments(states=tuple(SegmentState))}
        report.orphans = [
            relative
            for relative in report.orphans
            if relative not in known and (store.data_dir / relative).exists()
        ]
    report.seconds = time.monotonic() - started
    return report


def _found(row: SegmentRecord, problem: str, *, quarantined: bool) -> SegmentProblem:
    return SegmentProblem(
        topic=row.topic,
        partition=row.partition,
        start_offset=row.start_offset,
        end_offset=row.end_offset,
        path=row.path,
        problem=problem,
        quarantined=quarantined,
    )


def _partition_files(data_dir: Path) -> Iterator[str]:
    """Paths relative to data_dir, '/'-separated like the manifest's, of the files in the
    partition folders."""
    for path in sorted((data_dir / "topics").glob("*/*/*")):
        if path.is_file():
            yield path.relative_to(data_dir).as_posix()


def verify_at_start(store: StoreHandle, *, full: bool) -> VerifyReport | None:
    """What serve runs before its workers start: the manifest's own integrity check always,
    and with `full` every segment's checksums (bad ones are quarantined). Returns the report
    of the full check (None without `full`).

    Raises:
        ManifestUnusableError: The manifest fails SQLite's integrity check.
    """
    problems = store.manifest.integrity_check()
    if problems:
        raise ManifestUnusableError(
            store.data_dir, f"fails SQLite's integrity check ({'; '.join(problems[:3])})"
        )
    if not full:
        return None
    # The manifest was just checked: only the files are left.
    report = _check_files(store, VerifyReport(str(store.data_dir), deep=False), quarantine=True)
    log.info(
        "store_verified",
        data_dir=str(store.data_dir),
        segments=report.segments,
        bytes=report.bytes,
        seconds=round(report.seconds, 3),
        problems=len(report.problems),
        quarantined=len(report.quarantined) + len(report.problems),
        orphans=len(report.orphans),
        temp_files=len(report.temp_files),
    )
    return report


def forget_quarantined(store: StoreHandle) -> int:
    """Hand every quarantined segment to retention; returns how many.

    Quarantined rows stay (excluded from reads, listed by verify) until an operator gives
    up on them; marking them deleting lets retention remove file and row the usual
    crash-safe way, after the deletion grace.
    """
    rows = store.manifest.segments(states=(SegmentState.QUARANTINED,))
    moved = store.manifest.mark_deleting([row.id for row in rows])
    for row in rows:
        if row.id in moved:
            log.warning(
                "quarantined_segment_released",
                topic=row.topic,
                partition=row.partition,
                start_offset=row.start_offset,
                end_offset=row.end_offset,
                path=row.path,
            )
    return len(moved)
