"""`format: avro | protobuf | json_schema` (and `key_format`): records in Confluent's wire
format, decoded with their writer schema from the schema registry into typed columns.

A record's fields become columns (a value that is not a record/message/object becomes the
column `value`); a decoded key becomes the column `key_decoded`, next to the key's bytes.
Consecutive records of one writer schema form one batch. A new writer schema widens the
topic's columns as json does (fields are never dropped; a batch carries every column seen so
far), so the writer seals a new segment with the evolved schema; a schema whose fields cannot
be widened into the columns (a field that changes type) makes its records poison, naming the
subject and version.

Nothing here changes before every schema the records name has been fetched: an unreachable
registry raises RegistryUnavailableError with the decoder as it was, and the caller waits
(pauses the partition, or asks the producer to retry) instead of skipping records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import structlog

from bridge.ingest.decode.avro_arrow import UnsupportedSchemaError
from bridge.ingest.decode.common import Decoded, poison_at
from bridge.ingest.decode.event_times import event_times
from bridge.ingest.decode.names import renamed, twins
from bridge.ingest.decode.registry import SchemaSource, UnknownSchemaError
from bridge.ingest.decode.wire import (
    HEADER,
    Framed,
    FramingError,
    Reader,
    make_reader,
    unframe,
)
from bridge.ingest.records import KEY, VALUE, Kept, kept_columns
from plateau_core.conform import conform
from plateau_core.schema_merge import unified_schema
from plateau_core.stored_names import OWN, TAKEN, clashes, stored_name

log = structlog.get_logger(__name__)

KEY_DECODED = "key_decoded"
PLAIN_VALUE = "value"


@dataclass(frozen=True)
class _Side:
    """How one part of a record (value or key) is decoded."""

    column: str  # where a part that is not a record lands
    fmt: str  # avro | protobuf | json_schema | raw


@dataclass
class _Row:
    row: int
    value: Any
    key: Any
    group: tuple[int, int]  # (value reader, key reader) identities: one batch per run


class SchemaDecoder:
    def __init__(
        self,
        kept: Kept,
        source: SchemaSource,
        value_format: str,
        key_format: str,
        timestamp_field: str | None = None,
    ) -> None:
        self.kept = kept
        self.source = source
        self.value = _Side(PLAIN_VALUE, value_format)
        self.key = _Side(KEY_DECODED, key_format) if key_format != "raw" else None
        self.timestamp_field = timestamp_field
        # Names a field is stored beside with a `_` suffix: a decoded key's column too.
        self.taken = TAKEN if self.key is None else (*TAKEN, KEY_DECODED)
        # The columns so far, under their stored names.
        self.known: pa.Schema | None = None
        self._readers: dict[tuple[str, int, tuple[int, ...]], Reader | str] = {}
        self._named: dict[int, tuple[Reader, str]] = {}  # id(reader) -> (reader, its schema)

    def seed(self, stored: pa.Schema) -> None:
        """Start from the columns the plateau topic already has (after a restart)."""
        # A column of a field stored under its own name before it took the suffix is left
        # out: carried on, every new segment would hold it again, empty.
        fields = [
            f
            for f in stored
            if f.name not in OWN and (f.name == KEY_DECODED or not clashes(f.name, self.taken))
        ]
        try:
            self.known = _widen(self.known, pa.schema(fields))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return  # stored segments that already disagree: decoding goes on from what it sees

    def decode(self, records: pa.RecordBatch) -> Decoded:
        result = Decoded()
        if records.num_rows == 0:
            return result
        values = self._framed(self.value, records.column(VALUE).to_pylist())
        keys = (
            self._framed(self.key, records.column(KEY).to_pylist())
            if self.key is not None
            else None
        )
        readers = self._fetch(values, keys)  # may raise RegistryUnavailableError: no change yet
        rows: list[_Row] = []
        for row, framed in enumerate(values):
            try:
                value, value_id = self._read(self.value, framed, readers, "value")
                key, key_id = (None, 0)
                if self.key is not None and keys is not None:
                    key, key_id = self._read(self.key, keys[row], readers, "key")
            except _RecordError as exc:
                result.poison.append(poison_at(records, row, str(exc)))
                continue
            rows.append(_Row(row, value, key, (value_id, key_id)))
        for run in _runs(rows):
            self._build(records, run, result)
        result.poison.sort(key=lambda p: p.row)
        return result

    def unfetched(
        self, values: Sequence[bytes | None], keys: Sequence[bytes | None]
    ) -> list[tuple[int, str | None]]:
        """The writer schemas these records' values and keys name that are not in memory
        yet, as (schema id, rendering): a caller that must not block (the Kafka API's event
        loop) fetches them elsewhere first with `source.prefetch`. Only the header's id is
        read; a bad header is left for `decode` to report."""
        missing: set[tuple[int, str | None]] = set()
        for side, column in ((self.value, values), (self.key, keys)):
            if side is None or side.fmt == "raw":
                continue
            rendering = "serialized" if side.fmt == "protobuf" else None
            for data in column:
                if data is None or len(data) < HEADER or data[0] != 0:
                    continue
                schema_id = int.from_bytes(data[1:HEADER], "big")
                if not self.source.cached(schema_id):
                    missing.add((schema_id, rendering))
        return sorted(missing, key=lambda m: m[0])

    # --- schemas --------------------------------------------------------------------------

    @staticmethod
    def _framed(side: _Side, column: list[bytes | None]) -> list[Framed | bytes | str | None]:
        """Each record's header read: Framed, the bytes themselves for a raw side, why the
        header is bad (str), or None for no bytes at all."""
        if side.fmt == "raw":
            return list(column)
        protobuf = side.fmt == "protobuf"
        found: list[Framed | bytes | str | None] = []
        for data in column:
            if data is None:
                found.append(None)
                continue
            try:
                found.append(unframe(data, protobuf))
            except FramingError as exc:
                found.append(str(exc))
        return found

    def _fetch(
        self,
        values: Sequence[Framed | bytes | str | None],
        keys: Sequence[Framed | bytes | str | None] | None,
    ) -> dict[tuple[str, int, tuple[int, ...]], Reader | str]:
        """A reader (or why there is none) for every writer schema the records name."""
        wanted: set[tuple[str, int, tuple[int, ...]]] = set()
        for side, column in ((self.value, values), (self.key, keys)):
            if side is None or column is None or side.fmt == "raw":
                continue
            wanted.update((side.fmt, f.schema_id, f.indexes) for f in column if type(f) is Framed)
        return {wanted_key: self._reader(*wanted_key) for wanted_key in sorted(wanted)}

    def _reader(self, fmt: str, schema_id: int, indexes: tuple[int, ...]) -> Reader | str:
        cached = self._readers.get((fmt, schema_id, indexes))
        if cached is not None:
            return cached
        try:
            writer = self.source.get(schema_id, "serialized" if fmt == "protobuf" else None)
        except UnknownSchemaError as exc:
            return str(exc)  # not remembered: the registry may have it on the next batch
        try:
            reader: Reader | str = make_reader(fmt, writer, indexes)
        except UnsupportedSchemaError as exc:
            reader = f"{writer.where} cannot be stored as columns: {exc}"
        except Exception as exc:  # a schema the mappings trip on: its records fail, not the worker
            reader = f"{writer.where} cannot be stored as columns: {type(exc).__name__}: {exc}"
            log.warning("schema_not_mapped", where=writer.where, error=reader)
        self._readers[(fmt, schema_id, indexes)] = reader
        if not isinstance(reader, str):
            self._named[id(reader)] = (reader, writer.where)
        return reader

    def _where(self, identity: int, default: str) -> str:
        found = self._named.get(identity)
        return default if found is None else found[1]

    def _read(
        self,
        side: _Side,
        framed: Framed | bytes | str | None,
        readers: dict[tuple[str, int, tuple[int, ...]], Reader | str],
        part: str,
    ) -> tuple[Any, int]:
        if side.fmt == "raw":
            return framed, 0
        if framed is None:
            if part == "key":
                return None, 0  # a record without a key
            raise _RecordError("null value (tombstone): nothing to decode")
        if not isinstance(framed, Framed):
            raise _RecordError(f"{part}: {framed!s}")
        reader = readers[(side.fmt, framed.schema_id, framed.indexes)]
        if isinstance(reader, str):
            raise _RecordError(f"{part}: {reader}")
        try:
            return reader.read(framed.payload), id(reader)
        except Exception as exc:  # decoders raise many kinds on bad bytes
            where = self._where(id(reader), f"schema id {framed.schema_id}")
            raise _RecordError(f"{part} does not decode with {where}: {_short(exc)}") from None

    # --- batches ------------------------------------------------------------------------------

    def _build(self, records: pa.RecordBatch, run: list[_Row], result: Decoded) -> None:
        value_type = self._type(run[0].group[0], self.value)
        key_type = self._type(run[0].group[1], self.key) if self.key is not None else None
        try:
            fields, keys = self._columns(run, value_type, key_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            if len(run) > 1:  # bisect: only the records Arrow refuses become poison
                middle = len(run) // 2
                self._build(records, run[:middle], result)
                self._build(records, run[middle:], result)
                return
            where = self._where(run[0].group[0], "its writer schema")
            reason = f"the value decoded with {where} does not fit its columns: {_short(exc)}"
            result.poison.append(poison_at(records, run[0].row, reason))
            return
        bad = twins(fields, self.taken)
        columns = renamed(fields, self.taken)
        if keys is not None:
            columns[KEY_DECODED] = keys
        table = pa.RecordBatch.from_pydict(columns)
        try:
            schema = _widen(self.known, table.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            where = self._where(run[0].group[0], "the writer schema")
            reason = f"{where} is incompatible with the topic's columns: {_short(exc)}"
            result.poison += [poison_at(records, r.row, reason) for r in run]
            return
        self.known = schema
        table = conform(table, schema)
        rows = [r.row for r in run]
        timestamps = None
        if self.timestamp_field is not None:
            field = stored_name(self.timestamp_field, self.taken)
            timestamps, late = event_times(pa.Table.from_batches([table]), field)
            bad = {**late, **bad}
        if bad:
            result.poison += [poison_at(records, rows[i], bad[i]) for i in sorted(bad)]
            keep = pa.array([i for i in range(len(rows)) if i not in bad], pa.int64())
            table = table.take(keep)
            timestamps = None if timestamps is None else timestamps.take(keep)
            rows = [rows[i] for i in keep.to_pylist()]
        if not rows:
            return
        out = kept_columns(
            records, self.kept, rows=pa.array(rows, pa.int64()), timestamps=timestamps
        )
        for name in table.schema.names:
            out[name] = table.column(name)
        result.batches.append(pa.RecordBatch.from_pydict(out))

    def _type(self, identity: int, side: _Side | None) -> pa.DataType | None:
        if side is None:
            return None
        if side.fmt == "raw":
            return pa.binary()
        found = self._named.get(identity)
        return None if found is None else found[0].arrow_type

    def _columns(
        self, run: list[_Row], value_type: pa.DataType | None, key_type: pa.DataType | None
    ) -> tuple[dict[str, pa.Array], pa.Array | None]:
        """The value's fields by name, and the decoded keys (None without `key_format`)."""
        fields: dict[str, pa.Array] = {}
        values = pa.array([r.value for r in run], type=value_type)
        if pa.types.is_struct(values.type):
            for field, column in zip(values.type, values.flatten(), strict=True):
                fields[field.name] = column
        else:
            fields[self.value.column] = values
        keys = None
        if self.key is not None:
            keys = pa.array([r.key for r in run], type=key_type)
        return fields, keys


class _RecordError(Exception):
    pass


def _runs(rows: list[_Row]) -> list[list[_Row]]:
    runs: list[list[_Row]] = []
    for row in rows:
        if runs and runs[-1][-1].group == row.group:
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def _widen(known: pa.Schema | None, new: pa.Schema) -> pa.Schema:
    """`known` widened by `new` as the readers merge segment schemas: a timestamp that gains
    or loses its zone (Avro's local-timestamp-* and timestamp-*) becomes one in UTC, and the
    batches conformed to it hold the naive values as UTC, as the readers take them."""
    if known is None:
        return new
    return unified_schema([known, new])


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]
