"""`plateau replicate --compact`: small data files rewritten, old snapshots expired.

Each run commits at least one file per (day, Kafka partition) it touched, so a table fed
every minute gathers small files. Compaction rewrites the small plateau files of one
(day, partition) into files of about `file_bytes`, in offset order, in one commit that
carries the table's offsets and store id forward (replication's exactly-once and store
checks read them from the newest snapshot). Expiry then drops snapshots past the
retention, keeping the newest few, and deletes the data files only the dropped snapshots
read.

A compaction that fails definitely (the commit refused) deletes the files it wrote; one
killed before committing leaves `.c<tag>` files no snapshot reads (so does a column
replacement killed before its commit, iceberg_migration.py), which the next compaction
deletes once they are older than an hour (younger ones may belong to a compaction running
elsewhere). In a local warehouse it also deletes the temp files (`.tmp-{pid}-`) killed
writes left in folders no run looks in again, by the rule replication's own sweep follows
(Target.abandoned). The same hour applies to the table's `metadata/` folder:
manifests and manifest lists of expired snapshots, and the metadata files and manifests a
commit killed half-way wrote, are deleted once nothing the table still names refers to them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import structlog
from pyarrow import fs
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from plateau_core.schema import OFFSET
from plateau_spark.replication.iceberg_commit import (
    STORE_ID,
    committed_offsets,
    committed_state,
    offset_properties,
)
from plateau_spark.replication.iceberg_files import DATA_DIR, data_dir, data_name, parse_data_name
from plateau_spark.replication.iceberg_schema import iceberg_arrow_schema
from plateau_spark.replication.target import Target, log_temp_removed

# A data or metadata file nothing names is removed once this old: younger ones may belong to
# a run or compaction still in progress (on this node or another sharing the table).
STALE_FILE_S = 3600.0

log = structlog.get_logger("plateau.replication.iceberg")


@dataclass
class MaintenanceReport:
    files_rewritten: int = 0
    files_written: int = 0
    snapshots_expired: int = 0
    files_deleted: int = 0
    metadata_files_deleted: int = 0


def compact(
    table: Table, *, topic: str, small_bytes: int, file_bytes: int, compression: str
) -> MaintenanceReport:
    """Rewrite the table's small plateau data files, per (day, partition), in one commit."""
    report = MaintenanceReport()
    groups: dict[tuple[int, int], list[DataFile]] = {}
    for task in table.scan().plan_files():
        data = task.file
        name = data.file_path.rsplit("/", 1)[-1]
        if parse_data_name(name) is None or data.file_size_in_bytes >= small_bytes:
            continue
        key = (int(data.partition[0]), int(data.partition[1]))
        groups.setdefault(key, []).append(data)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    if not groups:
        return report
    schema = iceberg_arrow_schema(table.schema())
    old: list[DataFile] = []
    new: list[str] = []
    try:
        for (day, partition), files in sorted(groups.items()):
            folder = f"{table.location()}/{data_dir(_day(day), partition)}"
            new += _rewrite(
                table.io,
                files,
                schema=schema,
                folder=folder,
                file_bytes=file_bytes,
                compression=compression,
            )
            old += files
        _commit(table, old, new, topic)
    except Exception:
        for path in new:
            table.io.delete(path)
        raise
    report.files_rewritten, report.files_written = len(old), len(new)
    log.info(
        "iceberg_compacted",
        topic=topic,
        files_rewritten=len(old),
        files_written=len(new),
        partitions=sorted({p for _, p in groups}),
        offsets=committed_offsets(table),
    )
    return report


def _day(days_since_epoch: int) -> date:
    return date(1970, 1, 1) + timedelta(days=days_since_epoch)


def _rewrite(
    io: FileIO,
    files: list[DataFile],
    *,
    schema: pa.Schema,
    folder: str,
    file_bytes: int,
    compression: str,
) -> list[str]:
    """The files' rows in offset order, as files of about `file_bytes`; their paths."""
    ordered = sorted(files, key=lambda f: f.file_path)  # names start with the first offset
    written: list[str] = []
    batch: list[pa.Table] = []
    size = 0
    for data in ordered:
        with io.new_input(data.file_path).open() as stream:
            batch.append(_conformed(pq.read_table(stream), schema))
        size += data.file_size_in_bytes
        if size >= file_bytes:
            written.append(_write(io, pa.concat_tables(batch), folder, compression))
            batch, size = [], 0
    if batch:
        written.append(_write(io, pa.concat_tables(batch), folder, compression))
    return written


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A file written under an older schema, with the table's current columns."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _write(io: FileIO, rows: pa.Table, folder: str, compression: str) -> str:
    offsets = rows.column(OFFSET)
    first, last = int(offsets[0].as_py()), int(offsets[-1].as_py())
    path = f"{folder}/{data_name(first, last, uuid.uuid4().hex[:8])}"
    with io.new_output(path).create(overwrite=False) as stream:
        pq.write_table(rows, stream, compression=compression)
    return path


def _commit(table: Table, old: list[DataFile], new: list[str], topic: str) -> None:
    """One overwrite snapshot replacing `old` with `new`; the offsets (and the store id)
    carried forward. A commit another writer got ahead of is refused, not retried: the
    files it would drop may be gone from the new current snapshot."""
    state = committed_state(table)
    extra = {"plateau.operation": "compact"}
    if state.store_id is not None:
        extra[STORE_ID] = state.store_id
    properties = offset_properties(state.offsets, [], extra)
    transaction = table.transaction()
    with transaction.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
        for data in old:
            overwrite.delete_data_file(data)
        for path in new:
            overwrite.append_data_file(
                parquet_file_to_data_file(table.io, transaction.table_metadata, path)
            )
    try:
        transaction.commit_transaction()
    except CommitFailedException as exc:
        log.warning("iceberg_compaction_conflict", topic=topic, error=str(exc))
        raise


def expire(
    table: Table,
    location: Target,
    *,
    topic: str,
    retention_s: float,
    keep: int,
    now: float | None = None,
) -> MaintenanceReport:
    """Drop snapshots older than `retention_s` (never the newest `keep`, the current one, nor
    the head of a branch or tag), then delete the data files that only they read, and stale
    files nothing reads."""
    report = MaintenanceReport()
    cutoff_ms = int(((time.time() if now is None else now) - retention_s) * 1000)
    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    protected = {s.snapshot_id for s in snapshots[-keep:]}
    current = table.current_snapshot()
    if current is not None:
        protected.add(current.snapshot_id)
    # Heads of branches and tags: Iceberg refuses to expire them, and whoever set the tag
    # still reads through it.
    protected.update(ref.snapshot_id for ref in table.metadata.refs.values())
    doomed = [
        s.snapshot_id
        for s in snapshots
        if s.timestamp_ms < cutoff_ms and s.snapshot_id not in protected
    ]
    before = _referenced(table, (s.snapshot_id for s in snapshots))
    if doomed:
        table.maintenance.expire_snapshots().by_ids(doomed).commit()
        table.refresh()
    after = _referenced(table, (s.snapshot_id for s in table.snapshots()))
    for path in sorted(before - after):
        table.io.delete(path)
    report.snapshots_expired, report.files_deleted = len(doomed), len(before - after)
    report.files_deleted += _remove_unreferenced_data(table, location, after, topic)
    report.metadata_files_deleted = _remove_stale_metadata(table, location)
    log.info(
        "iceberg_snapshots_expired",
        topic=topic,
        snapshots_expired=len(doomed),
        files_deleted=report.files_deleted,
        metadata_files_deleted=report.metadata_files_deleted,
        snapshots_left=len(table.snapshots()),
    )
    return report


def _referenced(table: Table, snapshot_ids: Iterable[int]) -> set[str]:
    paths: set[str] = set()
    for snapshot_id in snapshot_ids:
        snapshot = table.snapshot_by_id(snapshot_id)
        if snapshot is None:
            continue
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                paths.add(entry.data_file.file_path)
    return paths


def _remove_unreferenced_data(
    table: Table, location: Target, referenced: set[str], topic: str
) -> int:
    """Data files of plateau's naming no snapshot reads, older than STALE_FILE_S: left by a
    compaction killed before its commit, or by a replication run that failed before its
    commit and whose segments retention deleted before a next run could find the files.
    Also a local write's temp file that a killed write left (Target.abandoned): a column
    replacement rewrites files in folders no pending segment's rows go to, and a run's own
    sweep of pending folders finds a temp file too young when it comes soon after the kill;
    this listing is the only one of every folder."""
    filesystem = location.filesystem()
    selector = fs.FileSelector(location.path(DATA_DIR), recursive=True, allow_not_found=True)
    removed = 0
    stale_before = datetime.now(UTC) - timedelta(seconds=STALE_FILE_S)
    for info in filesystem.get_file_info(selector):
        relative = info.path.removeprefix(location.root + "/")
        if info.type == fs.FileType.File and location.abandoned(relative):
            filesystem.delete_file(info.path)
            log_temp_removed("iceberg_temp_file_removed", topic, relative)
            continue
        parsed = parse_data_name(info.base_name)
        if info.type != fs.FileType.File or parsed is None:
            continue
        full = f"{table.location()}/{relative}"
        if full in referenced or info.mtime is None or info.mtime > stale_before:
            continue
        filesystem.delete_file(info.path)
        removed += 1
        kind = "compaction" if parsed[2] else "replication"
        log.warning("iceberg_unreferenced_data_file_removed", path=full, left_by=kind)
    return removed


def _named_metadata(table: Table) -> set[str]:
    """Names of the `metadata/` files the table still refers to: its metadata file and the
    earlier ones its log keeps, and each live snapshot's manifest list and manifests."""
    names = {table.metadata_location.rsplit("/", 1)[-1]}
    names.update(entry.metadata_file.rsplit("/", 1)[-1] for entry in table.metadata.metadata_log)
    for snapshot in table.snapshots():
        names.add(snapshot.manifest_list.rsplit("/", 1)[-1])
        names.update(m.manifest_path.rsplit("/", 1)[-1] for m in snapshot.manifests(table.io))
    return names


def _remove_stale_metadata(table: Table, location: Target) -> int:
    """Files of `metadata/` the table no longer names, once older than an hour: younger
    ones may belong to a commit in progress elsewhere."""
    named = _named_metadata(table)
    filesystem = location.filesystem()
    selector = fs.FileSelector(location.path("metadata"), allow_not_found=True)
    stale_before = datetime.now(UTC) - timedelta(seconds=STALE_FILE_S)
    removed = 0
    for info in filesystem.get_file_info(selector):
        if info.type != fs.FileType.File or info.base_name in named:
            continue
        if info.mtime is None or info.mtime > stale_before:
            continue
        filesystem.delete_file(info.path)
        removed += 1
        log.warning("iceberg_stale_metadata_removed", table=table.name(), file=info.base_name)
    return removed
