"""The replication job: plan sealed segments into files, write them with Spark, record them.

Order of a run, and why it cannot duplicate rows:
0. A produced topic whose replica records another store's id (its marker file, owner.py)
   is refused, and none of its files is touched: its offsets name other records than the
   replica's. One recording none is marked as this store's.
1. Files left by an unfinished run (offsets at or past the partition's replicated_offset,
   in the folders the pending segments' dates map to) are deleted: their rows are about to
   be written again, perhaps grouped differently.
2. A topic whose column the store widened since its files were written (bigint, then
   double) has those files rewritten in the new type first (parquet_migration.py).
3. The tasks write their files, each complete and durable under its final name.
4. One manifest transaction marks the segments replicated and advances replicated_offset.
A crash before 4 leaves only files that step 1 of the next run removes or overwrites, and
a migration that step 2 of the next run completes.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import pyarrow.compute as pc
import pyarrow.parquet as pq
import structlog
from py4j.protocol import Py4JError
from pyarrow import fs
from pyspark.errors import PySparkException

from plateau_core.errors import PlateauError
from plateau_core.manifest import SegmentRecord, SegmentState
from plateau_core.names import MANIFEST_FILE
from plateau_core.policies import MiB
from plateau_core.schema import OFFSET
from plateau_core.store import Store
from plateau_core.stored_names import TwinColumnsError
from plateau_core.topic_schema import topic_schema
from plateau_spark.errors import ReplicaOwnerError, TopicReplicationError
from plateau_spark.jobs import spark_message
from plateau_spark.replication.files import (
    ReplicaFile,
    ReplicaTask,
    parse_replica_name,
    pending_days,
    replica_dir,
    replica_file_name,
    replica_schema,
    write_task,
)
from plateau_spark.replication.owner import Consumed, ParquetOwners
from plateau_spark.replication.parquet_migration import ReplicaTypes
from plateau_spark.replication.spark_probe import spark_answers
from plateau_spark.replication.spark_write import run_spark
from plateau_spark.replication.target import Target, TargetError, log_temp_removed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("plateau.replication")

DEFAULT_FILE_BYTES = 128 * MiB
LOCK_FILE = "replication.lock"

Runner = Callable[[list[ReplicaTask]], list[list[ReplicaFile]]]
# Points of a run a test can fail at (the `step` hook), by name: "migration_file_rewritten"
# after each file a migration rewrites; the Iceberg job names more.
Step = Callable[[str], None]


class ReplicationBusyError(PlateauError):
    """Another replication run holds this store's replication lock."""


@dataclass
class ReplicationReport:
    segments: int = 0
    files: int = 0
    rows: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    orphans_removed: int = 0
    files_migrated: int = 0  # files rewritten because the store widened one of their columns
    seconds: float = 0.0
    partitions: dict[str, int] = field(default_factory=dict)  # "topic[p]" -> replicated_offset

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / MiB / self.seconds if self.seconds else 0.0


class Replicator:
    def __init__(
        self,
        store: Store,
        target: Target,
        *,
        file_bytes: int = DEFAULT_FILE_BYTES,
        compression: str = "zstd",
        topics: Sequence[str] | None = None,
        consumed: Consumed | None = None,
        step: Step | None = None,
    ) -> None:
        """`consumed`: whether the configuration consumes a topic from Kafka (owner.py says
        what else tells produced topics from consumed ones)."""
        self.store = store
        # Staging of its own: another store's run may be staging in the same target.
        self.target = target.for_store(store.manifest.store_id())
        self.file_bytes = file_bytes
        self.compression = compression
        self.topics = None if topics is None else list(topics)
        self.consumed = consumed
        self._step = step or (lambda _name: None)
        # Topics the last plan left out, each with its error (`plan`).
        self.unplanned: dict[str, str] = {}

    def plan(self) -> list[ReplicaTask]:
        """Sealed, unreplicated segments, grouped per partition into ~file_bytes tasks. A
        topic whose segment schemas cannot be read as one (a segment file holding a column
        and its `_` suffixed name) is left out, with its error in `unplanned`."""
        tasks: list[ReplicaTask] = []
        self.unplanned = {}
        for topic in self.topics if self.topics is not None else self.store.topics():
            pending = self.store.manifest.segments(topic, states=(SegmentState.SEALED,))
            if not pending:
                continue
            try:
                schema = topic_schema(self.store.manifest, topic).schema
            except TwinColumnsError as exc:
                # The topic's own: it waits, named at the end, instead of every topic after it.
                self.unplanned[topic] = str(exc)  # names the topic and the files
                log.error(
                    "replication_topic_failed", topic=topic, target=self.target.uri, error=str(exc)
                )
                continue
            for group in _groups(pending, self.file_bytes):
                tasks.append(
                    ReplicaTask(
                        topic=topic,
                        partition=group[0].partition,
                        segments=tuple(group),
                        data_dir=str(self.store.data_dir),
                        schema=schema,
                        target=self.target,
                        compression=self.compression,
                    )
                )
        return tasks

    def run_once(self, spark: SparkSession | None = None) -> ReplicationReport:
        """Replicate everything sealed now. With `spark`, the segments are read through the
        `plateau` connector and written by Spark's Parquet writer, one job per topic;
        without, each task is written in this process by pyarrow (the same files).

        Raises ReplicaOwnerError, once the other topics are replicated, naming each produced
        topic whose replica another store feeds; TopicReplicationError (naming those too)
        for each topic that failed otherwise. A topic whose Spark job failed is one of
        those when Spark still answers a one-row job (spark_probe.py); when it does not,
        the Spark error ends the run, as an I/O error of the target does: Spark or the
        target is away, and the other topics would fail alike."""
        started = time.monotonic()
        report = ReplicationReport()
        failed: dict[str, str] = {}
        with self._lock():
            tasks = self.plan()
            failed.update(self.unplanned)
            if not tasks:
                if failed:
                    raise TopicReplicationError(failed)
                return report
            filesystem = self.target.filesystem()
            owners = ParquetOwners(self.store, self.target, self.consumed)
            refused = owners.claim(filesystem, {t.topic for t in tasks})
            tasks = [t for t in tasks if t.topic not in refused]
            if not tasks:
                raise ReplicaOwnerError(refused)
            self.target.clear_staging(filesystem)
            report.orphans_removed, young_temps = self._remove_unfinished(filesystem, tasks)
            types = ReplicaTypes(self.target, filesystem, self.compression, self._step)
            results: list[list[ReplicaFile]] = [[] for _ in tasks]
            moved: set[int] = set()
            for topic in sorted({t.topic for t in tasks}):
                indexes = [i for i, t in enumerate(tasks) if t.topic == topic]
                written = self._try_topic(
                    spark,
                    filesystem,
                    types,
                    [tasks[i] for i in indexes],
                    report,
                    young_temps=young_temps.get(topic, ()),
                    failed=failed,
                )
                if written is None:
                    continue
                for index, files in zip(indexes, written, strict=True):
                    results[index] = self._record(filesystem, tasks[index], files, moved)
        report.seconds = time.monotonic() - started
        for task, files in zip(tasks, results, strict=True):
            if not files and not any(s.id in moved for s in task.segments):
                continue
            report.segments += sum(1 for s in task.segments if s.id in moved)
            report.files += len(files)
            report.rows += sum(f.rows for f in files)
            report.bytes_read += task.size_bytes
            report.bytes_written += sum(f.bytes for f in files)
            report.partitions[f"{task.topic}[{task.partition}]"] = task.end_offset
            log.info(
                "segments_replicated",
                topic=task.topic,
                partition=task.partition,
                start_offset=task.start_offset,
                end_offset=task.end_offset,
                segments=len(task.segments),
                files=[f.path for f in files],
                rows=sum(f.rows for f in files),
                target=self.target.uri,
            )
        if failed:
            raise TopicReplicationError(failed, refused)
        if refused:
            raise ReplicaOwnerError(refused)
        return report

    def _try_topic(
        self,
        spark: SparkSession | None,
        filesystem: fs.FileSystem,
        types: ReplicaTypes,
        tasks: list[ReplicaTask],
        report: ReplicationReport,
        *,
        young_temps: Sequence[str],
        failed: dict[str, str],
    ) -> list[list[ReplicaFile]] | None:
        """_write_topic, or None when the topic failed on its own: it is held back (added to
        `failed`), as a killed run's topic is, instead of every topic after it."""
        topic = tasks[0].topic
        try:
            return self._write_topic(
                spark, filesystem, types, tasks, report, young_temps=young_temps
            )
        except (OSError, TargetError):
            raise  # the target is away: the other topics would fail alike
        except (PySparkException, Py4JError) as exc:
            # Spark that still runs a job failed this one for the topic's own data (a
            # segment the connector refuses, a value the writer refuses); Spark that does
            # not would fail every topic after it alike.
            if spark is None or not spark_answers(spark, topic):
                raise
            self._held_back(topic, exc, spark_message(exc), failed)
        except Exception as exc:  # anything else is the topic's own (a bug, a refused type)
            self._held_back(topic, exc, str(exc), failed)
        return None

    def _held_back(self, topic: str, exc: Exception, message: str, failed: dict[str, str]) -> None:
        error = f"{type(exc).__name__}: {message}"
        log.error(
            "replication_topic_failed",
            topic=topic,
            target=self.target.uri,
            error=error,
            exc_info=exc,
        )
        failed[topic] = f"topic {topic!r}: {error}"

    def _write_topic(
        self,
        spark: SparkSession | None,
        filesystem: fs.FileSystem,
        types: ReplicaTypes,
        tasks: list[ReplicaTask],
        report: ReplicationReport,
        *,
        young_temps: Sequence[str],
    ) -> list[list[ReplicaFile]]:
        """One topic's files: its replica migrated to the store's types (and `young_temps`
        named in its record), its tasks written; each task's files, in task order (none
        recorded yet)."""
        topic = tasks[0].topic
        wanted = replica_schema(tasks[0].schema)
        report.files_migrated += types.prepare(topic, wanted, young_temps)
        results = (
            run_spark(spark, tasks, self._manifest_url(), self.compression)
            if spark is not None
            else _run_here(tasks)
        )
        written = [replica for files in results for replica in files]
        report.files_migrated += types.conform_written(topic, wanted, written)
        return results

    def _record(
        self,
        filesystem: fs.FileSystem,
        task: ReplicaTask,
        files: list[ReplicaFile],
        moved: set[int],
    ) -> list[ReplicaFile]:
        """Mark the task's segments replicated (adding them to `moved`); its files, or none
        when they were discarded."""
        recorded = self.store.manifest.mark_replicated([s.id for s in task.segments], whole=True)
        if recorded:
            moved.update(recorded)
            return files
        self._discard(filesystem, task, files)
        return []

    def _discard(
        self, filesystem: fs.FileSystem, task: ReplicaTask, files: list[ReplicaFile]
    ) -> None:
        """A task's segments changed while it was copied (a consolidation replaced one, a
        check quarantined one): its files hold rows of segments no longer pending, so they go,
        and the next run copies what replaced them."""
        for replica in files:
            self.target.delete(filesystem, replica.path)
        log.warning(
            "replica_task_discarded",
            topic=task.topic,
            partition=task.partition,
            start_offset=task.start_offset,
            end_offset=task.end_offset,
            files=[f.path for f in files],
            reason="a segment of it is no longer sealed (consolidated or quarantined meanwhile)",
        )

    def _manifest_url(self) -> str | None:
        """The manifest's URL when it is not the default file in the data folder."""
        url = self.store.manifest.url
        default = self.store.data_dir / MANIFEST_FILE
        return None if url in (f"sqlite:///{default}", str(default)) else url

    def _remove_unfinished(
        self, filesystem: fs.FileSystem, tasks: list[ReplicaTask]
    ) -> tuple[int, dict[str, list[str]]]:
        """Delete files of an unfinished earlier run that hold rows of the pending segments
        (the run writes those rows again); returns how many, and per topic the temp files
        found that a killed write may have left but that are too young to tell. Those are
        named in the topic's record for later runs to look at again (ReplicaTypes.prepare):
        once this run replicates their folder's rows, no run lists the folder again."""
        removed = 0
        young: dict[str, list[str]] = {}
        spans = {(s.topic, s.partition): s.replicated_offset for s in self.store.spans()}
        by_partition: dict[tuple[str, int], list[SegmentRecord]] = {}
        for task in tasks:
            by_partition.setdefault((task.topic, task.partition), []).extend(task.segments)
        for (topic, partition), segments in by_partition.items():
            # Only files reaching into the pending segments' offsets are rewritten: below
            # them are finished files, some of segments retention has removed since (after a
            # rebuild-manifest, replicated_offset starts at 0 again).
            floor = max(spans.get((topic, partition), 0), min(s.start_offset for s in segments))
            for relative in self._candidate_files(filesystem, topic, partition, segments):
                if self.target.abandoned(relative):
                    self.target.delete(filesystem, relative)
                    log_temp_removed("replica_temp_file_removed", topic, relative, partition)
                    continue
                if self.target.temp_file(relative):
                    young.setdefault(topic, []).append(relative)
                    continue
                bounds = parse_replica_name(relative.rsplit("/", 1)[-1])
                if bounds is None or bounds[1] < floor:
                    continue
                if bounds[0] < floor:
                    # It also holds rows below every pending segment, whose segments may be
                    # gone (retention, then a rebuild-manifest reset replicated_offset): those
                    # rows stay, in a file of their own, and the rest is written again.
                    self._keep_below(filesystem, relative, floor)
                self.target.delete(filesystem, relative)
                removed += 1
                log.warning(
                    "replica_unfinished_removed",
                    topic=topic,
                    partition=partition,
                    first_offset=bounds[0],
                    last_offset=bounds[1],
                    replicated_offset=floor,
                    path=relative,
                )
        return removed, young

    def _keep_below(self, filesystem: fs.FileSystem, relative: str, floor: int) -> None:
        """Write the rows of a replica file below offset `floor` to a file of their own, in
        the same folder (its name from its offsets, so a retry writes the same one)."""
        with filesystem.open_input_file(self.target.path(relative)) as handle:
            table = pq.ParquetFile(handle).read()
        kept = table.filter(pc.less(table.column(OFFSET), floor))
        bounds = pc.min_max(kept.column(OFFSET))
        first, last = bounds["min"].as_py(), bounds["max"].as_py()
        folder = relative.rsplit("/", 1)[0]
        name = f"{folder}/{replica_file_name(first, last)}"
        self.target.write(
            filesystem, name, lambda out: pq.write_table(kept, out, compression=self.compression)
        )
        log.warning(
            "replica_file_split",
            path=relative,
            kept=name,
            rows_kept=kept.num_rows,
            rewritten_from_offset=floor,
            reason="it held rows of pending segments and of segments no longer here",
        )

    def _candidate_files(
        self, filesystem: fs.FileSystem, topic: str, partition: int, segments: list[SegmentRecord]
    ) -> Iterator[str]:
        days = pending_days(segments)
        folder = partial(replica_dir, topic, partition=partition)
        return self.target.partition_files(filesystem, topic, days, folder, partition)

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """One replication run per store at a time: two would delete each other's files."""
        path = self.store.data_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ReplicationBusyError(
                    f"another replication run holds {path}; try again when it ends"
                ) from None
            yield
        finally:
            os.close(fd)


def _groups(segments: list[SegmentRecord], file_bytes: int) -> Iterator[list[SegmentRecord]]:
    """Contiguous runs of one partition, cut before a segment that would pass file_bytes."""
    current: list[SegmentRecord] = []
    size = 0
    for segment in sorted(segments, key=lambda s: (s.partition, s.start_offset)):
        joins = (
            current
            and current[-1].partition == segment.partition
            and current[-1].end_offset == segment.start_offset
            and size + segment.size_bytes <= file_bytes
        )
        if not joins and current:
            yield current
            current, size = [], 0
        current.append(segment)
        size += segment.size_bytes
    if current:
        yield current


def _run_here(tasks: list[ReplicaTask]) -> list[list[ReplicaFile]]:
    return [write_task(task) for task in tasks]
