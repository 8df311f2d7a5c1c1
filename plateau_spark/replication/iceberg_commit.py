"""A topic's Iceberg table: created or evolved to the store's schema, its committed Kafka
offsets read back, and replicated files committed with those offsets, exactly once.

Every snapshot plateau commits carries, in its summary:
- `plateau.offsets`: for every Kafka partition replicated so far, the offset after the last
  row the table holds (JSON `{"0": 300, "1": 200}`), cumulative, so the newest such snapshot
  answers alone and expiring older snapshots loses nothing;
- `plateau.offset-ranges`: the offsets this commit added, per partition (`{"0": [150, 300]}`);
- `plateau.store-id`: for a produced topic, the id of the store feeding the table (its
  offsets are that store's own numbering, see owner.py), carried forward like the offsets.
This is how the Iceberg Kafka Connect sink keeps exactly once: the table, not the writer,
remembers what it holds, so a writer that crashed after committing skips what is there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import structlog
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import Table, TableProperties
from pyiceberg.transforms import DayTransform, IdentityTransform

from plateau_core.schema import TIMESTAMP
from plateau_spark.replication.iceberg_files import parse_data_name
from plateau_spark.replication.iceberg_schema import (
    DAY,
    PARTITION,
    SchemaConflictError,
    check_evolution,
    iceberg_arrow_schema,
    in_table_types,
)
from plateau_spark.replication.owner import refuse
from plateau_spark.replication.target import TargetError

OFFSETS = "plateau.offsets"
RANGES = "plateau.offset-ranges"
STORE_ID = "plateau.store-id"
_RETRY_PAUSE_S = 0.05
# pyiceberg retries a refused commit by re-applying it to the new snapshot with the summary
# it had: offsets another writer committed meanwhile would be missing from it. plateau
# retries itself, recomputing the summary (commit_files), so pyiceberg must not.
_OWN_RETRIES = {TableProperties.COMMIT_NUM_RETRIES: "0"}

log = structlog.get_logger("plateau.replication.iceberg")


@dataclass(frozen=True)
class OffsetRange:
    """Rows [start, end) of one Kafka partition, committed together."""

    partition: int
    start: int
    end: int


def ensure_table(
    catalog: Catalog,
    identifier: tuple[str, ...],
    schema: pa.Schema,
    topic: str,
    vacant: Callable[[str], None],
    *,
    replace: Callable[[Table, dict[str, pa.DataType]], Table],
) -> Table:
    """The topic's table, created partitioned by day(timestamp) and the Kafka partition, or
    given the columns `schema` adds. `replace(table, {name: type})` replaces the columns the
    store widened in a way Iceberg cannot promote (iceberg_migration.py), before the others
    are added. Raises SchemaConflictError naming a field whose type changed in any other
    way. `vacant(location)` is asked before a table is created there, and raises to keep it
    from being created."""
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        table = _create(catalog, identifier, schema, vacant)
        log.info("iceberg_table_created", topic=topic, table=".".join(identifier))
        return table
    if any(table.properties.get(k) != v for k, v in _OWN_RETRIES.items()):
        with table.transaction() as transaction:
            transaction.set_properties(_OWN_RETRIES)
    current = iceberg_arrow_schema(table.schema())
    evolution = check_evolution(current, schema, topic)
    if evolution.replaced:
        table = replace(table, evolution.replaced)
        current = iceberg_arrow_schema(table.schema())
    added = evolution.added
    if added:
        try:
            with table.update_schema() as update:
                update.union_by_name(in_table_types(schema, current, topic))
        except (ValueError, TypeError) as exc:
            raise SchemaConflictError(f"topic {topic!r}: cannot evolve {added}: {exc}") from None
        log.info("iceberg_columns_evolved", topic=topic, table=".".join(identifier), columns=added)
    return table


def _create(
    catalog: Catalog, identifier: tuple[str, ...], schema: pa.Schema, vacant: Callable[[str], None]
) -> Table:
    try:
        transaction = catalog.create_table_transaction(
            identifier,
            schema=schema,
            properties={TableProperties.PARQUET_COMPRESSION: "zstd", **_OWN_RETRIES},
        )
        vacant(transaction.table_metadata.location)
        with transaction.update_spec() as spec:
            spec.add_field(TIMESTAMP, DayTransform(), DAY)
            spec.add_field(PARTITION, IdentityTransform(), PARTITION)
        # Files plateau writes carry no field ids: readers map their columns by name.
        mapping = transaction.table_metadata.schema().name_mapping.model_dump_json()
        transaction.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
        transaction.commit_transaction()
    except TableAlreadyExistsError:  # another node created it first
        pass
    except CommitFailedException:
        # The SQL catalog's answer when another node created it between the staging and
        # this commit.
        if not catalog.table_exists(identifier):
            raise
    return catalog.load_table(identifier)


@dataclass(frozen=True)
class Committed:
    """What plateau's commits say a table holds."""

    offsets: dict[int, int]  # per Kafka partition, the offset after its last row
    store_id: str | None  # the store feeding a produced topic's table; None: none recorded


def committed_offsets(table: Table) -> dict[int, int]:
    """Per Kafka partition, the offset after the last row the table holds (empty if none)."""
    return committed_state(table).offsets


def committed_state(table: Table) -> Committed:
    """The table's committed offsets, and the store id recorded with them.

    The newest snapshot of the current branch's history carrying plateau's offsets answers;
    snapshots without them (another engine's maintenance) are looked past. When none is
    left (expiry dropped those that carried them), the names of plateau's data files the
    table reads say the offsets: taking nothing for committed would re-add rows, and would
    delete committed files as an uncommitted run's. No store id is known then: the table
    counts as recording none (like one written before store ids were recorded).
    """
    current = snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        properties = {} if summary is None else summary.additional_properties
        text = properties.get(OFFSETS)
        if text is not None:
            offsets = {int(p): int(o) for p, o in json.loads(text).items()}
            return Committed(offsets, properties.get(STORE_ID))
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else table.snapshot_by_id(parent)
    if current is None:
        return Committed({}, None)
    offsets = _offsets_from_files(table)
    if offsets:
        log.warning(
            "iceberg_offsets_from_file_names",
            table=table.name(),
            offsets={str(p): o for p, o in sorted(offsets.items())},
        )
    return Committed(offsets, None)


def _offsets_from_files(table: Table) -> dict[int, int]:
    """Per Kafka partition, the offset after the last row of plateau's data files in the
    current snapshot (`.../partition=P/{first}-{last}[.c{tag}].parquet`)."""
    offsets: dict[int, int] = {}
    for task in table.scan().plan_files():
        folder, _, name = task.file.file_path.rpartition("/")
        parsed = parse_data_name(name)
        _, _, partition = folder.rpartition("/partition=")
        if parsed is None or not partition.isdigit():
            continue
        key = int(partition)
        offsets[key] = max(offsets.get(key, 0), parsed[1] + 1)
    return offsets


def described(table: Table) -> str:
    """The table as an error or a log line names it."""
    return f"Iceberg table {'.'.join(table.name())} at {table.location()}"


def offset_properties(
    committed: Mapping[int, int], ranges: list[OffsetRange], extra: Mapping[str, str]
) -> dict[str, str]:
    """The summary properties of a commit adding `ranges` to a table holding `committed`."""
    offsets = dict(committed)
    for r in ranges:
        offsets[r.partition] = max(offsets.get(r.partition, 0), r.end)
    return {
        OFFSETS: json.dumps({str(p): o for p, o in sorted(offsets.items())}),
        RANGES: json.dumps({str(r.partition): [r.start, r.end] for r in ranges}),
        **extra,
    }


def commit_files(
    table: Table,
    paths: list[str],
    ranges: list[OffsetRange],
    *,
    topic: str,
    retries: int,
    store_id: str | None = None,
) -> Table:
    """Add the data files in one snapshot that records `ranges` (and `store_id`, the store
    feeding a produced topic's table); returns the table as committed. A commit another
    writer got ahead of is tried again on the refreshed table, unless that writer committed
    rows of these ranges (then nothing is committed and TargetError says so) or recorded
    another store (ReplicaOwnerError); an outcome the catalog could not tell is settled by
    reading the offsets back."""
    owner = {} if store_id is None else {STORE_ID: store_id}
    for attempt in range(retries + 1):
        state = committed_state(table)
        committed = state.offsets
        if store_id is not None and state.store_id not in (None, store_id):
            raise refuse(
                topic, recorded=state.store_id, store_id=store_id, replica=described(table)
            )
        _check_not_committed(committed, ranges, topic)
        transaction = table.transaction()
        properties = offset_properties(committed, ranges, owner)
        transaction.add_files(paths, snapshot_properties=properties)
        try:
            committed_table = transaction.commit_transaction()
        except CommitFailedException as exc:
            log.warning("iceberg_commit_conflict", topic=topic, attempt=attempt + 1, error=str(exc))
        except CommitStateUnknownException as exc:
            log.warning("iceberg_commit_unknown", topic=topic, error=str(exc))
            table.refresh()
            after = committed_offsets(table)
            if all(after.get(r.partition, 0) >= r.end for r in ranges):
                _log_commit(table, ranges, topic, len(paths))
                return table
        else:
            _log_commit(committed_table, ranges, topic, len(paths))
            return committed_table
        table.refresh()
        time.sleep(_RETRY_PAUSE_S * (attempt + 1))
    raise TargetError(
        f"topic {topic!r}: the Iceberg commit lost to other writers {retries + 1} times; "
        "the next run tries again"
    )


def _log_commit(table: Table, ranges: list[OffsetRange], topic: str, files: int) -> None:
    snapshot = table.current_snapshot()
    for r in ranges:
        log.info(
            "iceberg_committed",
            topic=topic,
            partition=r.partition,
            start_offset=r.start,
            end_offset=r.end,
            files=files,
            snapshot_id=None if snapshot is None else snapshot.snapshot_id,
            table=table.name(),
        )


def _check_not_committed(
    committed: Mapping[int, int], ranges: list[OffsetRange], topic: str
) -> None:
    for r in ranges:
        if committed.get(r.partition, 0) > r.start:
            raise TargetError(
                f"topic {topic!r} partition {r.partition}: offsets from "
                f"{r.start} were committed to the Iceberg table by another writer meanwhile"
            )
