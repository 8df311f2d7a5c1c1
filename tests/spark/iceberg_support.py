"""Helpers of the Iceberg replication tests: a replicator on a fresh warehouse, and the rows
of a table counted by (partition, offset)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pyiceberg.table import Table

from plateau_core import Store
from plateau_spark.replication import IcebergReplicator, IcebergSettings, Target
from plateau_spark.replication.iceberg_job import Step


def replicator(
    store: Store,
    warehouse: Path | Target,
    *,
    step: Step | None = None,
    file_bytes: int = 128 * 2**20,
    settings: IcebergSettings | None = None,
) -> IcebergReplicator:
    target = warehouse if isinstance(warehouse, Target) else Target.parse(str(warehouse))
    return IcebergReplicator(store, target, settings, step=step, file_bytes=file_bytes)


def table_keys(table: Table) -> Counter[tuple[int, int]]:
    """Each (partition, offset) of the table's current snapshot, with how often it is there."""
    rows = table.scan(selected_fields=("partition", "offset")).to_arrow()
    pairs = zip(
        rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True
    )
    return Counter(pairs)


def data_files(table: Table) -> list[str]:
    return sorted(t.file.file_path.rsplit("/data/", 1)[1] for t in table.scan().plan_files())
