"""One seal, run on a writer pool thread: each partition's segment files written durably
(temp -> fsync -> rename -> fsync dir), then one manifest transaction recording every
partition of the group (segments, watermark moves, producer batches) or none of them.

The files of a group whose transaction definitely failed are removed (they would be orphans);
after an unknown outcome (the commit raised, but may have landed) the manifest is asked
before anything is removed, as iceberg-python does for its catalog commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import structlog

from plateau_core.adaptive_compression import AdaptiveCompression
from plateau_core.errors import ManifestConflictError, SealError
from plateau_core.group_commit import GroupCommitter
from plateau_core.lazy import materialize, span
from plateau_core.listener import SealedSegment, WriterListener, tell
from plateau_core.manifest import Manifest
from plateau_core.manifest.records import PartitionCommit, SegmentFile
from plateau_core.names import partition_dir, relative_segment_path
from plateau_core.policies import IndexPolicy, WriterPolicy
from plateau_core.rollup import rollup_table
from plateau_core.segment_stats import SegmentStats
from plateau_core.slog import SealJob

log = structlog.get_logger(__name__)

WriteSegment = Callable[..., tuple[Path, SegmentStats]]


@dataclass(frozen=True)
class Sealed:
    """A job's seal as recorded: its commit and the files (in offset order) it wrote."""

    job: SealJob
    commit: PartitionCommit
    files: tuple[Path, ...]


def seal_group(
    group: list[SealJob],
    data_dir: Path,
    policy: WriterPolicy,
    write: WriteSegment,
    committer: GroupCommitter,
    *,
    codecs: AdaptiveCompression,
) -> list[Sealed]:
    """Write every job's files, then record the whole group in one transaction.

    The files are written one after another on this thread: written on several threads at
    once they took longer under load (the writes contend for the interpreter lock with the
    listener; measured in docs/benchmarks.md, the Kafka API).

    `codecs` picks each partition's codec (compressed only where it pays).

    Raises whatever failed; the manifest then holds none of the group, and the files it
    wrote are gone unless the failure was a conflict (another writer's files may be there).
    """
    done: list[Written] = []
    try:
        for job in group:
            done.append(_write_job(job, data_dir, policy, write, codecs))
        # A job's roll-up segments are recorded in the same transaction as its raw ones:
        # both land, or neither (exactly once, whatever replays).
        derived = [commit for written in done for commit in written.derived]
        sealed = [
            Sealed(
                job,
                PartitionCommit(
                    job.topic, job.partition, segments, tuple(job.producers), job.advance_to
                ),
                paths,
            )
            for job, (paths, segments, _, _) in zip(group, done, strict=True)
        ]
        _record([*(s.commit for s in sealed), *derived], committer)
    except (ManifestConflictError, CommitUnknownError):
        raise
    except Exception:
        for written in done:
            for path in (*written.files, *written.derived_files):
                path.unlink(missing_ok=True)
        raise
    return sealed


class Written(NamedTuple):
    """What a job wrote: its raw segment files and rows, and its roll-ups' (per derived
    topic, one commit of the job's partition)."""

    files: tuple[Path, ...]
    segments: tuple[SegmentFile, ...]
    derived: tuple[PartitionCommit, ...]
    derived_files: tuple[Path, ...]


def _write_job(
    job: SealJob,
    data_dir: Path,
    policy: WriterPolicy,
    write: WriteSegment,
    codecs: AdaptiveCompression,
) -> Written:
    directory = partition_dir(data_dir, job.topic, job.partition)
    files: list[Path] = []
    segments: list[SegmentFile] = []
    derived: dict[str, list[SegmentFile]] = {}
    derived_files: list[Path] = []
    try:
        for run in job.runs():
            table = pa.Table.from_batches(materialize(run))
            codec = codecs.choose(job.topic, job.partition)
            path, stats = write(directory, table, codec, fsync=policy.fsync, index=job.index)
            files.append(path)
            relative = relative_segment_path(job.topic, job.partition, stats.start_offset)
            segments.append(SegmentFile(stats, relative, table.schema))
            for rollup in job.rollups:
                topic = rollup.derived_topic(job.topic)
                rolled = rollup_table(table, rollup, topic=job.topic, partition=job.partition)
                path, stats = write(
                    partition_dir(data_dir, topic, job.partition),
                    rolled,
                    codecs.choose(topic, job.partition),
                    fsync=policy.fsync,
                    index=IndexPolicy(),
                )
                derived_files.append(path)
                relative = relative_segment_path(topic, job.partition, stats.start_offset)
                derived.setdefault(topic, []).append(SegmentFile(stats, relative, rolled.schema))
    except BaseException:
        for path in (*files, *derived_files):  # the caller never hears of these
            path.unlink(missing_ok=True)
        raise
    commits = tuple(
        PartitionCommit(topic, job.partition, tuple(rows)) for topic, rows in derived.items()
    )
    return Written(tuple(files), tuple(segments), commits, tuple(derived_files))


class CommitUnknownError(SealError):
    """A commit failed and the manifest could not say whether it landed: its files stay
    (an orphan is removed when the partition is next acquired), and the retry finds out."""


def _record(commits: list[PartitionCommit], committer: GroupCommitter) -> None:
    try:
        committer.commit(commits)
    except Exception as exc:
        # Only a definite failure makes the files orphans: if the group did land (the error
        # came after the commit, say a connection lost during COMMIT), the seal succeeded,
        # and its retry then conflicts with itself.
        try:
            landed = recorded(committer.manifest, commits)
        except Exception as unknown:
            raise CommitUnknownError(
                f"the seal's commit failed ({exc}) and the manifest cannot say whether it "
                f"landed ({unknown})"
            ) from exc
        if not landed:
            raise


def recorded(manifest: Manifest, commits: list[PartitionCommit]) -> bool:
    """Whether a group is in the manifest (a group lands whole, so one partition tells)."""
    for commit in commits:
        if commit.segments:
            first = commit.segments[0].stats
            return manifest.has_segment(commit.topic, commit.partition, first)
    return all(
        (manifest.watermark(c.topic, c.partition) or 0) >= (c.end_offset or 0) for c in commits
    )


def announce(sealed: Sealed, listener: WriterListener) -> None:
    """Log the seal's lifecycle events and tell the listener, segment by segment."""
    job, commit = sealed.job, sealed.commit
    seconds = time.monotonic() - job.started
    for path, segment in zip(sealed.files, commit.segments, strict=True):
        stats = segment.stats
        log.info(
            "segment_sealed",
            topic=job.topic,
            partition=job.partition,
            start_offset=stats.start_offset,
            end_offset=stats.end_offset,
            records=stats.record_count,
            bytes=stats.size_bytes,
            seconds=round(seconds, 4),
        )
        tell(
            listener.on_sealed,
            SealedSegment(
                topic=job.topic,
                partition=job.partition,
                start_offset=stats.start_offset,
                end_offset=stats.end_offset,
                record_count=stats.record_count,
                size_bytes=stats.size_bytes,
                path=path,
                seconds=seconds,
            ),
        )
    last_end = commit.segments[-1].stats.end_offset if commit.segments else None
    if job.advance_to is not None and (last_end is None or job.advance_to > last_end):
        log.info(
            "watermark_advanced",
            topic=job.topic,
            partition=job.partition,
            next_offset=job.advance_to,
            producers=len(job.producers),
            reason="records handled without landing here",
        )
        tell(listener.on_advanced, job.topic, job.partition, job.advance_to)


def log_failure(job: SealJob, exc: Exception, retry_in_s: float) -> None:
    spans = [found for b in job.batches if (found := span(b)) is not None]
    log.error(
        "seal_failed",
        topic=job.topic,
        partition=job.partition,
        start_offset=spans[0][0] if spans else None,
        last_offset=spans[-1][1] if spans else None,
        next_offset=job.advance_to,
        records=job.rows,
        error=str(exc),
        error_type=type(exc).__name__,
        retry_in_s=round(retry_in_s, 2),
    )
