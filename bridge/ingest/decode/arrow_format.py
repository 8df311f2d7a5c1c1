"""`format: arrow`: each message value is an Arrow IPC stream of many rows.

The columnar fast path: producers that already hold Arrow data send it as is, and every
row keeps its message's offset and timestamp (and key and headers, when kept).
"""

from __future__ import annotations

import pyarrow as pa

from bridge.ingest.decode.common import Decoded, poison_at
from bridge.ingest.decode.event_times import event_times
from bridge.ingest.decode.names import renamed, seeded_fields, twins
from bridge.ingest.records import VALUE, Kept, kept_columns
from plateau_core.errors import InvalidInputError
from plateau_core.schema import TIMESTAMP_TYPE, normalize_batch
from plateau_core.schema_merge import unified_schema


class ArrowDecoder:
    def __init__(self, kept: Kept, timestamp_field: str | None = None) -> None:
        self.kept = kept
        self.timestamp_field = timestamp_field
        # The data columns so far, merged as the topic's readers merge them: a message whose
        # columns they would not merge is poison, so the segments stay readable as one table.
        self.known: pa.Schema | None = None

    def seed(self, stored: pa.Schema) -> None:
        """Start from the columns the plateau topic already has (after a restart)."""
        self.known = _unified(self.known, pa.schema(seeded_fields(stored))) or self.known

    def decode(self, records: pa.RecordBatch) -> Decoded:
        result = Decoded()
        for row, value in enumerate(records.column(VALUE).to_pylist()):
            try:
                table = _read_stream(value)
            # A truncated or corrupted stream surfaces as OSError ("Expected to be able to
            # read 80 bytes for message body") as often as ArrowInvalid.
            except (pa.ArrowException, OSError, ValueError) as exc:
                result.poison.append(poison_at(records, row, f"not an Arrow IPC stream: {exc}"))
                continue
            if table.num_rows == 0:
                continue
            problem = _schema_problem(table)
            if problem is not None:
                result.poison.append(poison_at(records, row, problem))
                continue
            known = _unified(self.known, table.schema)
            if known is None:
                change = _type_change(self.known, table.schema)
                result.poison.append(poison_at(records, row, change))
                continue
            timestamps = None
            if self.timestamp_field is not None:
                timestamps, bad = event_times(table, self.timestamp_field)
                if bad:
                    result.poison.append(poison_at(records, row, next(iter(bad.values()))))
                    continue
            self.known = known
            result.batches.extend(self._rows(records, row, table, timestamps))
        return _merge_runs(result)

    def _rows(
        self, records: pa.RecordBatch, row: int, table: pa.Table, timestamps: pa.Array | None
    ) -> list[pa.RecordBatch]:
        """Every row of the record's table, each with the record's envelope."""
        n = table.num_rows
        repeated = pa.array([row] * n, pa.int64())
        columns = kept_columns(records, self.kept, rows=repeated)
        if timestamps is not None:
            columns["timestamp"] = timestamps
        columns.update(renamed(_columns(table)))
        return [pa.RecordBatch.from_pydict(columns)]


def _read_stream(value: bytes | None) -> pa.Table:
    if value is None:
        raise ValueError("null value (tombstone)")
    with pa.ipc.open_stream(pa.py_buffer(value)) as reader:
        table = reader.read_all()
    table.validate(full=True)
    return table


def _unified(known: pa.Schema | None, schema: pa.Schema) -> pa.Schema | None:
    """`known` widened by `schema` as the readers merge segment schemas (new columns added,
    int32 to int64, float32 to float64, timestamps of another unit or zone, naive or not),
    or None when a column changed to a type the readers would read only as text.

    The message's columns are stored as sent: each segment holds its own types, and the
    readers merge them. After a restart `known` is the readers' merged schema (a timestamp
    column in UTC where segments differ), so what landed before lands after it too.
    """
    if known is None:
        return schema.remove_metadata()
    if schema.equals(known):  # the common case, without building a new schema
        return known
    try:
        return unified_schema([known, schema.remove_metadata()])
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def _type_change(known: pa.Schema | None, schema: pa.Schema) -> str:
    """The columns whose types the readers would not merge with the topic's, for the
    reason: those that only widened are left out."""
    changed = [
        f"{f.name!r} is {f.type}, the topic's is {known.field(f.name).type}"
        for f in schema
        if known is not None
        and f.name in known.names
        and _unified(pa.schema([known.field(f.name)]), pa.schema([f])) is None
    ]
    return "columns changed type: " + "; ".join(changed)


def _schema_problem(table: pa.Table) -> str | None:
    """Why the writer would refuse these columns (duplicate names, a type plateau does not
    store), why they cannot be stored as they are (a column named like one of plateau's and
    one of its stored name, both with values), or None.

    Checked per message so that the message is poison: the writer's refusal of an append
    would stop the worker whatever on_error says.
    """
    names = table.column_names
    empty = table.to_batches()[0].slice(0, 0)
    columns = list(empty.columns)
    if len(set(names)) == len(names):  # duplicates are the writer's to name
        both = twins({name: table.column(name) for name in names})
        if both:
            return next(iter(both.values()))
        kept = renamed(dict(zip(names, columns, strict=True)))
        names, columns = list(kept), list(kept.values())
    probe = pa.RecordBatch.from_arrays(
        [pa.array([], pa.int64()), pa.array([], TIMESTAMP_TYPE), *columns],
        names=["offset", "timestamp", *names],
    )
    try:
        normalize_batch(probe)
    except InvalidInputError as exc:
        return f"not storable: {exc}"
    return None


def _columns(table: pa.Table) -> dict[str, pa.Array]:
    return {name: table.column(name).combine_chunks() for name in table.column_names}


def _merge_runs(result: Decoded) -> Decoded:
    """Neighbouring batches of one schema become one batch (fewer, larger appends)."""
    merged: list[pa.RecordBatch] = []
    run: list[pa.RecordBatch] = []
    for batch in result.batches:
        if run and not batch.schema.equals(run[0].schema):
            merged.append(pa.Table.from_batches(run).combine_chunks().to_batches()[0])
            run = []
        run.append(batch)
    if run:
        merged.append(pa.Table.from_batches(run).combine_chunks().to_batches()[0])
    result.batches = merged
    return result


__all__ = ["TIMESTAMP_TYPE", "ArrowDecoder"]
