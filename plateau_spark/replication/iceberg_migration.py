"""A column the store widened in a way Iceberg has no promotion for (long to double: an
inferred json integer that met a fraction), replaced in the topic's table.

Iceberg changes a column's type in place only where its readers widen old files themselves
(int to long, float to double). Anything else is a new column: the old one is deleted and
one of the same name and the new type is added, with a new field id. Its values are in the
data files, so every data file of the current snapshot holding the column is rewritten
with the values cast as the store's readers cast them (integers to the nearest double) and
a new name (`{first}-{last}.c{tag}.parquet`: a name no snapshot reads yet, which the next
compaction's sweep removes if no commit came to read it).

One transaction holds it all: the schema change, the name mapping moved to the new field
(plateau's data files carry no field ids and are read by name), and an overwrite snapshot
that replaces the old files by the new ones and carries the table's committed offsets and
store id forward (replication's exactly-once reads them from the newest snapshot). Readers
see the table before or after, never between. A run killed before the commit leaves the
table as it was, and the next run does it again; a commit another writer got ahead of is
refused, its files deleted, and the next run does it again too.

Snapshots from before the change keep their files, but read by time travel they show the
replaced column as null: the table's name mapping now gives its name to the new field.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import structlog
from pyiceberg.exceptions import CommitStateUnknownException
from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction

from plateau_core.schema import OFFSET
from plateau_spark.replication.iceberg_commit import STORE_ID, committed_state, offset_properties
from plateau_spark.replication.iceberg_files import data_name, parse_data_name
from plateau_spark.replication.iceberg_schema import SchemaConflictError
from plateau_spark.replication.job import Step
from plateau_spark.replication.target import Target, TargetError
from plateau_spark.replication.widening import rewrite_parquet

log = structlog.get_logger("plateau.replication.iceberg")

OPERATION = "plateau.operation"
_FIELD_ID = b"PARQUET:field_id"


def replace_columns(
    table: Table,
    location: Target,
    replaced: Mapping[str, pa.DataType],
    *,
    topic: str,
    compression: str,
    step: Step,
) -> tuple[Table, int]:
    """Replace each `replaced` column by one of its new type, and rewrite the data files
    holding it, in one commit; returns the table as committed and the files rewritten."""
    tasks = list(table.scan().plan_files())
    if any(task.delete_files for task in tasks):
        raise SchemaConflictError(
            f"topic {topic!r}: columns {sorted(replaced)} would be replaced by ones of the "
            "store's wider types, which rewrites the data files holding them, but the table "
            "has delete files (written by another engine) that name those files; rewrite the "
            "table's data files with that engine first (its rewrite_data_files)"
        )
    state = committed_state(table)
    before = [f.name for f in table.schema().fields]
    changes = {n: f"{table.schema().find_field(n).field_type} -> {t}" for n, t in replaced.items()}
    transaction = table.transaction()
    # Deleted first, then added in a second change: one change cannot tell a new column
    # from the deleted one of the same name when moving it back to its place.
    with transaction.update_schema() as update:
        for name in replaced:
            update.delete_column(name)
    with transaction.update_schema() as update:
        update.union_by_name(pa.schema([pa.field(n, t) for n, t in replaced.items()]))
        for name in [n for n in before if n in replaced]:
            position = before.index(name)
            if position == 0:
                update.move_first(name)
            else:
                update.move_after(name, before[position - 1])
    schema = transaction.table_metadata.schema()
    written: list[tuple[DataFile, str]] = []
    try:
        for task in tasks:
            path = _rewrite(
                task.file,
                table,
                location,
                schema=schema,
                replaced=replaced,
                compression=compression,
            )
            if path is not None:
                written.append((task.file, path))
                step("migration_file_rewritten")
        committed = _commit(transaction, table, written, state.offsets, state.store_id)
    except CommitStateUnknownException as exc:
        # The files may be in the table now: they stay (compaction's sweep removes them an
        # hour on if no snapshot reads them), and the next run reads the table again.
        raise TargetError(
            f"topic {topic!r}: the catalog could not tell whether the column change "
            f"committed ({exc}); the next run reads the table and does it again if not"
        ) from exc
    except BaseException:
        for _, path in written:
            with contextlib.suppress(OSError):
                table.io.delete(path)
        raise
    snapshot = committed.current_snapshot()
    for data, path in written:
        first, last = _bounds(data.file_path.rsplit("/", 1)[-1])
        log.info(
            "iceberg_file_migrated",
            topic=topic,
            partition=int(data.partition[1]),
            first_offset=first,
            last_offset=last,
            path=path,
            replaced=data.file_path,
        )
    log.info(
        "iceberg_columns_replaced",
        topic=topic,
        table=".".join(table.name()),
        columns=changes,
        files_rewritten=len(written),
        snapshot_id=None if snapshot is None else snapshot.snapshot_id,
        offsets={str(p): o for p, o in sorted(state.offsets.items())},
    )
    return committed, len(written)


def _rewrite(
    data: DataFile,
    table: Table,
    location: Target,
    *,
    schema: Schema,
    replaced: Mapping[str, pa.DataType],
    compression: str,
) -> str | None:
    """A copy of `data` with its replaced columns in their new types, next to it; its path,
    or None when the file holds none of them."""
    filesystem = location.filesystem()
    relative = data.file_path.removeprefix(f"{table.location()}/")
    with filesystem.open_input_file(location.path(relative)) as handle:
        source = pq.ParquetFile(handle)
        held = source.schema_arrow
        names = [n for n in held.names if n in replaced]
        if not names:
            return None
        if any(f.metadata and _FIELD_ID in f.metadata for f in held):
            # Another engine's file, read by field id: the new columns get the new ids.
            with_ids = schema_to_pyarrow(schema.select(*names), include_field_ids=True)
            fields = {f.name: f for f in with_ids}
        else:
            fields = {n: pa.field(n, replaced[n]) for n in names}
        folder, _, name = relative.rpartition("/")
        parsed = parse_data_name(name)
        first, last = parsed[:2] if parsed else _offsets(source)
        new = f"{folder}/{data_name(first, last, uuid.uuid4().hex[:8])}"
        location.write(
            filesystem, new, lambda out: rewrite_parquet(source, out, fields, compression)
        )
    return f"{table.location()}/{new}"


def _offsets(source: pq.ParquetFile) -> tuple[int, int]:
    """First and last offset of a file whose name does not say them (another engine's)."""
    bounds = pc.min_max(source.read(columns=[OFFSET]).column(OFFSET))
    return int(bounds["min"].as_py() or 0), int(bounds["max"].as_py() or 0)


def _bounds(name: str) -> tuple[int | None, int | None]:
    parsed = parse_data_name(name)
    return (parsed[0], parsed[1]) if parsed else (None, None)


def _commit(
    transaction: Transaction,
    table: Table,
    written: list[tuple[DataFile, str]],
    offsets: dict[int, int],
    store_id: str | None,
) -> Table:
    extra = {OPERATION: "replace-columns"}
    if store_id is not None:
        extra[STORE_ID] = store_id
    if written:
        properties = offset_properties(offsets, [], extra)
        update = transaction.update_snapshot(snapshot_properties=properties)
        with update.overwrite() as overwrite:
            for data, _ in written:
                overwrite.delete_data_file(data)
            for _, path in written:
                overwrite.append_data_file(
                    parquet_file_to_data_file(table.io, transaction.table_metadata, path)
                )
    return transaction.commit_transaction()
