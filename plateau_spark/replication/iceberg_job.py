"""Replication into Apache Iceberg tables, one per topic, exactly once.

Order of a run, per topic, and why it neither loses nor duplicates a row:
0. A produced topic whose table records another store's id is refused, and nothing of it
   is touched (owner.py): below the committed offsets are other records than the store's.
1. The table is created, or given the columns the store's schema added. A column the store
   widened in a way Iceberg has no promotion for (long to double) is replaced, its data
   files rewritten, in one commit carrying the offsets forward (iceberg_migration.py); any
   other type change is refused, naming the field.
2. The table's committed offsets are read from its snapshots (iceberg_commit.py). Pending
   segments wholly below them are already in the table (a run that died between its commit
   and the manifest update): they are only marked replicated. Rows below them in a segment
   that straddles the offset are skipped.
3. Data files of an uncommitted run (named by offsets at or past the committed offset, in
   the day folders the pending segments map to) are deleted: no snapshot reads them.
4. The data files are written, each complete under its final name.
5. One Iceberg commit adds them all, with the offset ranges (and for a produced topic
   this store's id) in the snapshot summary.
6. One manifest transaction marks the segments replicated.
A crash before 5 leaves files that step 3 of the next run deletes; a crash between 5 and 6
leaves segments that step 2 of the next run finds committed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa
import structlog
from pyarrow import fs
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import Table

from plateau_core.store import Store
from plateau_core.topic_schema import topic_schema
from plateau_spark.errors import ReplicaOwnerError, TopicReplicationError
from plateau_spark.replication.files import ReplicaFile, ReplicaTask, pending_days
from plateau_spark.replication.iceberg_catalog import IcebergSettings, open_catalog
from plateau_spark.replication.iceberg_commit import (
    OffsetRange,
    commit_files,
    committed_state,
    described,
    ensure_table,
)
from plateau_spark.replication.iceberg_files import (
    DATA_DIR,
    data_dir,
    parse_data_name,
    write_data_files,
)
from plateau_spark.replication.iceberg_maintenance import MaintenanceReport, compact, expire
from plateau_spark.replication.iceberg_migration import replace_columns
from plateau_spark.replication.iceberg_schema import (
    SchemaConflictError,
    iceberg_arrow_schema,
    in_table_types,
    table_schema,
)
from plateau_spark.replication.job import (
    DEFAULT_FILE_BYTES,
    ReplicationReport,
    Replicator,
    Step,
)
from plateau_spark.replication.owner import Consumed, OffsetOrigins, refuse
from plateau_spark.replication.target import Target, TargetError, log_temp_removed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("plateau.replication.iceberg")

# Points a test can fail at (the `step` hook, job.Step): "planned", "file_written" after
# each task's data files, "files_written", "committed" (before the manifest update), and
# "migration_file_rewritten" after each data file a column replacement rewrites.
__all__ = ["IcebergReplicator", "Step"]


class IcebergReplicator(Replicator):
    """`plateau replicate` with `format: iceberg`; `target` is the warehouse."""

    def __init__(
        self,
        store: Store,
        target: Target,
        settings: IcebergSettings | None = None,
        *,
        file_bytes: int = DEFAULT_FILE_BYTES,
        compression: str = "zstd",
        topics: Sequence[str] | None = None,
        consumed: Consumed | None = None,
        step: Step | None = None,
    ) -> None:
        super().__init__(
            store,
            target,
            file_bytes=file_bytes,
            compression=compression,
            topics=topics,
            consumed=consumed,
            step=step,
        )
        self.settings = settings or IcebergSettings()

    def catalog(self) -> Catalog:
        return open_catalog(self.settings, self.target, self.store.data_dir)

    def table(self, topic: str) -> Table:
        return self.catalog().load_table(self.settings.identifier(topic))

    def run_once(self, spark: SparkSession | None = None) -> ReplicationReport:
        """Replicate everything sealed now, one Iceberg commit per topic. The files are
        written in this process by pyarrow; `spark` is not used.

        Raises ReplicaOwnerError, once the other topics are replicated, naming each produced
        topic whose table another store feeds; SchemaConflictError (which then names those
        too) for each topic whose table cannot take a column's new type; TopicReplicationError
        (naming all of those too) for each topic that failed otherwise. An I/O error, or a
        commit another writer got ahead of, ends the run with TargetError."""
        del spark
        started = time.monotonic()
        report = ReplicationReport()
        refused: dict[str, str] = {}
        conflicts: dict[str, str] = {}
        failed: dict[str, str] = {}
        with self._lock():
            tasks = self.plan()
            if tasks:
                catalog = self.catalog()
                origins = OffsetOrigins(self.store, self.consumed)
                store_id = self.store.manifest.store_id()
                for topic in sorted({t.topic for t in tasks}):
                    mine = [t for t in tasks if t.topic == topic]
                    owner = store_id if origins.store_numbered(topic) else None
                    try:
                        self._replicate_topic(catalog, topic, mine, report, owner)
                    except ReplicaOwnerError as exc:
                        refused.update(exc.refused)
                    except SchemaConflictError as exc:
                        # Raised before anything of the topic is written: it waits, and the
                        # topics after it are replicated (it stopped them all, run after run).
                        conflicts[topic] = str(exc)
                        log.error(
                            "iceberg_schema_conflict",
                            topic=topic,
                            table=".".join(self.settings.identifier(topic)),
                            error=str(exc),
                        )
                    except CommitFailedException as exc:  # another writer got ahead of a change
                        raise TargetError(
                            f"topic {topic!r}: another writer changed its Iceberg table "
                            f"meanwhile, and this run's change was refused; the next run "
                            f"tries again ({exc})"
                        ) from exc
                    except OSError as exc:  # pyarrow's and pyiceberg's I/O errors
                        raise TargetError(
                            f"topic {topic!r}: cannot write the Iceberg table under "
                            f"{self.target.uri}: {exc}"
                        ) from exc
                    except TargetError:  # unreachable: the other topics would fail alike
                        raise
                    except Exception as exc:  # held back, named at the end
                        # Anything else is the topic's own (a type pyiceberg refuses, a bug):
                        # it waits, as a killed run's topic does, instead of every topic
                        # after it, run after run.
                        failed[topic] = f"topic {topic!r}: {type(exc).__name__}: {exc}"
                        log.error(
                            "iceberg_topic_failed",
                            topic=topic,
                            table=".".join(self.settings.identifier(topic)),
                            error=f"{type(exc).__name__}: {exc}",
                            exc_info=exc,
                        )
        report.seconds = time.monotonic() - started
        if failed:
            raise TopicReplicationError(failed, {**refused, **conflicts})
        if conflicts:
            problems = {**refused, **conflicts}
            raise SchemaConflictError("; ".join(problems[t] for t in sorted(problems)))
        if refused:
            raise ReplicaOwnerError(refused)
        return report

    def maintain(self, *, now: float | None = None) -> dict[str, MaintenanceReport]:
        """Compact the small data files of each replicated topic's table and expire its old
        snapshots (`plateau replicate --compact`); per topic, what was done."""
        reports: dict[str, MaintenanceReport] = {}
        with self._lock():
            catalog = self.catalog()
            for topic in self.topics if self.topics is not None else self.store.topics():
                try:
                    table = catalog.load_table(self.settings.identifier(topic))
                except NoSuchTableError:
                    continue
                try:
                    done = compact(
                        table,
                        topic=topic,
                        small_bytes=self.settings.small_file_bytes,
                        file_bytes=self.file_bytes,
                        compression=self.compression,
                    )
                    table.refresh()
                    expired = expire(
                        table,
                        self.target.at(table.location()),
                        topic=topic,
                        retention_s=self.settings.snapshot_retention_s,
                        keep=self.settings.min_snapshots,
                        now=now,
                    )
                except CommitFailedException as exc:
                    raise TargetError(
                        f"topic {topic!r}: another writer committed to its Iceberg table "
                        f"during maintenance, whose own commit was refused; run it again ({exc})"
                    ) from exc
                except OSError as exc:  # pyarrow's and pyiceberg's I/O errors
                    raise TargetError(
                        f"topic {topic!r}: cannot maintain the Iceberg table under "
                        f"{self.target.uri}: {exc}"
                    ) from exc
                done.snapshots_expired = expired.snapshots_expired
                done.files_deleted = expired.files_deleted
                done.metadata_files_deleted = expired.metadata_files_deleted
                reports[topic] = done
        return reports

    def _replicate_topic(
        self,
        catalog: Catalog,
        topic: str,
        tasks: list[ReplicaTask],
        report: ReplicationReport,
        owner: str | None,
    ) -> None:
        """`owner`: this store's id when the topic's offsets are its own (None: Kafka's)."""
        identifier = self.settings.identifier(topic)
        if owner is not None:
            # Before the table is evolved or a file of it deleted: a refused topic's table
            # is left as it is.
            self._check_owner(catalog, identifier, topic, owner)
        schema = table_schema(topic_schema(self.store.manifest, topic).schema, topic)
        table = ensure_table(
            catalog,
            identifier,
            schema,
            topic,
            partial(self._vacant, catalog, topic),
            replace=partial(self._replace_columns, topic, report),
        )
        # A column the table holds wider than this store does (another store widened it)
        # is written in the table's type.
        schema = in_table_types(schema, iceberg_arrow_schema(table.schema()), topic)
        committed = committed_state(table).offsets
        location = self.target.at(table.location())
        report.orphans_removed += self._remove_uncommitted(location, tasks, committed)
        self._step("planned")
        files: list[tuple[ReplicaTask, list[ReplicaFile]]] = []
        ranges: list[OffsetRange] = []
        for task in tasks:
            floor = committed.get(task.partition, 0)
            if task.end_offset <= floor:
                log.info(
                    "segments_already_in_table",
                    topic=topic,
                    partition=task.partition,
                    start_offset=task.start_offset,
                    end_offset=task.end_offset,
                    committed_offset=floor,
                )
                continue
            written = write_data_files(task, location, schema, floor)
            self._step("file_written")
            files.append((task, written))
            ranges.append(
                OffsetRange(task.partition, max(floor, task.start_offset), task.end_offset)
            )
            report.bytes_read += task.size_bytes
        self._step("files_written")
        paths = [f"{table.location()}/{f.path}" for _, written in files for f in written]
        if paths:
            commit_files(
                table,
                paths,
                _merged(ranges),
                topic=topic,
                retries=self.settings.commit_retries,
                store_id=owner,
            )
        self._step("committed")
        moved = set(self.store.manifest.mark_replicated([s.id for t in tasks for s in t.segments]))
        report.segments += len(moved)
        for task, written in files:
            report.files += len(written)
            report.rows += sum(f.rows for f in written)
            report.bytes_written += sum(f.bytes for f in written)
            log.info(
                "segments_replicated",
                topic=topic,
                partition=task.partition,
                start_offset=task.start_offset,
                end_offset=task.end_offset,
                segments=len(task.segments),
                files=[f.path for f in written],
                rows=sum(f.rows for f in written),
                table=".".join(identifier),
            )
        for task in tasks:
            report.partitions[f"{topic}[{task.partition}]"] = task.end_offset

    def _replace_columns(
        self,
        topic: str,
        report: ReplicationReport,
        table: Table,
        replaced: dict[str, pa.DataType],
    ) -> Table:
        location = self.target.at(table.location())
        table, rewritten = replace_columns(
            table,
            location,
            replaced,
            topic=topic,
            compression=self.compression,
            step=self._step,
        )
        report.files_migrated += rewritten
        return table

    def _check_owner(
        self, catalog: Catalog, identifier: tuple[str, ...], topic: str, owner: str
    ) -> None:
        """Raise ReplicaOwnerError when the topic's table records another store than `owner`.
        A table recording none (new, written before store ids were recorded, or its
        offsets read from file names) becomes `owner`'s with its next commit."""
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            return
        state = committed_state(table)
        if state.store_id is not None and state.store_id != owner:
            raise refuse(topic, recorded=state.store_id, store_id=owner, replica=described(table))
        if state.store_id is None and state.offsets:
            log.info(
                "replica_store_adopted",
                topic=topic,
                store_id=owner,
                target=described(table),
                offsets={str(p): o for p, o in sorted(state.offsets.items())},
            )

    def _vacant(self, catalog: Catalog, topic: str, location: str) -> None:
        """Raise ReplicaOwnerError when `location`, where the topic's table is about to be
        created, holds a table already: one the catalog lost (the default catalog lives in
        the data folder, and goes when it is wiped) or dropped without its files. A table
        created over it would delete its data files as an uncommitted run's."""
        folder = self.target.at(location)
        names = folder.list_files(folder.filesystem(), "metadata")
        found = sorted(n for n in names if n.endswith(".metadata.json"))
        if not found or catalog.table_exists(self.settings.identifier(topic)):
            # Another node sharing the catalog created it meanwhile: it is loaded instead.
            return
        log.error(
            "iceberg_table_not_in_catalog",
            topic=topic,
            table=".".join(self.settings.identifier(topic)),
            location=location,
            metadata_files=len(found),
        )
        raise ReplicaOwnerError(
            {
                topic: (
                    f"topic {topic!r} is not replicated: {location} holds an Iceberg table "
                    f"the catalog does not list as {'.'.join(self.settings.identifier(topic))} "
                    "(the catalog was lost, as the default one is with its data folder, or "
                    "the table was dropped without its files). Register that table in the "
                    f"catalog again (its newest metadata file, metadata/{found[-1]}, with "
                    "pyiceberg's register_table) or remove the folder; nothing in it is "
                    "changed until then"
                )
            }
        )

    def _remove_uncommitted(
        self, location: Target, tasks: list[ReplicaTask], committed: dict[int, int]
    ) -> int:
        """Delete data files of runs that wrote but never committed (no snapshot reads a
        file whose first offset is at or past the committed offset)."""
        filesystem = location.filesystem()
        location.clear_staging(filesystem)  # objects a killed run was still writing
        removed = 0
        for partition in sorted({t.partition for t in tasks}):
            floor = committed.get(partition, 0)
            mine = [t for t in tasks if t.partition == partition]
            for relative in self._candidates(location, filesystem, partition, mine):
                if location.abandoned(relative):
                    location.delete(filesystem, relative)
                    log_temp_removed(
                        "iceberg_temp_file_removed", mine[0].topic, relative, partition
                    )
                    continue
                parsed = parse_data_name(relative.rsplit("/", 1)[-1])
                if parsed is None or parsed[2] or parsed[0] < floor:
                    continue
                location.delete(filesystem, relative)
                removed += 1
                log.warning(
                    "iceberg_uncommitted_file_removed",
                    topic=mine[0].topic,
                    partition=partition,
                    first_offset=parsed[0],
                    last_offset=parsed[1],
                    committed_offset=floor,
                    path=relative,
                )
        return removed

    def _candidates(
        self, location: Target, filesystem: fs.FileSystem, partition: int, tasks: list[ReplicaTask]
    ) -> Iterator[str]:
        days = pending_days([s for t in tasks for s in t.segments])
        folder = partial(data_dir, partition=partition)
        return location.partition_files(filesystem, DATA_DIR, days, folder, partition)


def _merged(ranges: list[OffsetRange]) -> list[OffsetRange]:
    """One range per partition (a run's tasks of a partition are contiguous or gapped only
    where Kafka has no offsets)."""
    by_partition: dict[int, OffsetRange] = {}
    for r in ranges:
        have = by_partition.get(r.partition)
        by_partition[r.partition] = (
            r
            if have is None
            else OffsetRange(r.partition, min(have.start, r.start), max(have.end, r.end))
        )
    return [by_partition[p] for p in sorted(by_partition)]
