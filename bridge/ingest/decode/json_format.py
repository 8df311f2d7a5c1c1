"""`format: json`: one JSON object per message, parsed in bulk by Arrow's JSON reader.

With a declared `schema` the columns are exactly those fields (missing ones null, others
ignored). Without one, the schema is inferred and widened as new fields appear; a field is
never dropped, an integer beyond int64 is a decimal(38, 0) (json_integers.py), and an
integer field that meets a number with a fraction becomes a double.
A block that fails to parse is bisected so that only the offending messages become poison,
in offset order.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.json as pajson
import structlog

from bridge.ingest.decode.common import Decoded, poison_at
from bridge.ingest.decode.event_times import epoch_ms, event_times
from bridge.ingest.decode.json_integers import (
    float_places,
    holds_large,
    integers_at,
    place_name,
    with_exact,
)
from bridge.ingest.decode.names import renamed, seeded_fields, twins
from bridge.ingest.records import VALUE, Kept, kept_columns
from plateau_core.conform import conform
from plateau_core.schema import TIMESTAMP_TYPE

log = structlog.get_logger(__name__)

ARROW_TYPES: Mapping[str, pa.DataType] = {
    "string": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "timestamp": TIMESTAMP_TYPE,
}


class JsonDecoder:
    def __init__(
        self,
        kept: Kept,
        schema: Mapping[str, str] | None = None,
        timestamp_field: str | None = None,
        topic: str | None = None,
    ) -> None:
        self.kept = kept
        # For log lines; the consume path binds its topic and partition around `decode`.
        self.topic = topic
        self._rounded: set[str] = set()  # fields whose integers beyond 38 digits were logged
        self.declared = (
            None
            if schema is None
            else pa.schema([pa.field(n, ARROW_TYPES[t]) for n, t in schema.items()])
        )
        self.known: pa.Schema | None = self.declared
        self.timestamp_field = timestamp_field
        # Declared timestamps are written as ISO 8601 text or as epoch milliseconds; Arrow's
        # reader takes one of them per field. A block is read as the last one was, and
        # with the other when that fails (records mixing them are split until each reads;
        # a record whose timestamp fields are written differently from each other is poison).
        self._times = [n for n, t in (schema or {}).items() if t == "timestamp"]
        self._as_numbers = False

    def seed(self, stored: pa.Schema) -> None:
        """Start from the columns the plateau topic already has (after a restart): a field
        that changes type against them is poison, as it would be without the restart,
        instead of landing as a column the topic's segments cannot be read together with."""
        if self.declared is not None:
            return
        fields = seeded_fields(stored)
        # When the stored segments already disagree, decoding goes on from what it learns.
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowTypeError):
            self.known = _widen([self.known, pa.schema(fields)])

    def decode(self, records: pa.RecordBatch) -> Decoded:
        result = Decoded()
        lines: list[bytes] = []
        kept: list[int] = []  # the row of each line
        for row, value in enumerate(records.column(VALUE).to_pylist()):
            line, error = _one_line(value)
            if error is not None:
                result.poison.append(poison_at(records, row, error))
            else:
                lines.append(line)
                kept.append(row)
        offsets = records.column("offset").to_pylist()
        offsets = [offsets[row] for row in kept]
        pieces: list[tuple[int, int, pa.Table]] = []
        failures: list[tuple[int, str]] = []
        self._parse(lines, offsets, 0, len(lines), pieces=pieces, failures=failures)
        result.poison += [poison_at(records, kept[i], error) for i, error in failures]
        if pieces:
            schema = _widen([self.known, *(t.schema for _, _, t in pieces)])
            tables = [t for _, _, t in pieces]
            rows = [kept[i] for lo, hi, _ in pieces for i in range(lo, hi)]
            table = pa.concat_tables([_conform_table(t, schema) for t in tables])
            self._build(table, records, rows, result)
        result.poison.sort(key=lambda p: p.row)
        return result

    def _parse(
        self,
        lines: list[bytes],
        offsets: list[int],
        lo: int,
        hi: int,
        *,
        pieces: list[tuple[int, int, pa.Table]],
        failures: list[tuple[int, str]],
    ) -> None:
        if lo >= hi:
            return
        try:
            table = self._read(lines[lo:hi], offsets[lo:hi])
        except (pa.ArrowInvalid, pa.ArrowTypeError, _RowCountError, _NotEpochMsError) as exc:
            if hi - lo == 1:
                failures.append((lo, _short(exc)))
                return
            mid = (lo + hi) // 2
            # Left first: it widens `known`.
            self._parse(lines, offsets, lo, mid, pieces=pieces, failures=failures)
            self._parse(lines, offsets, mid, hi, pieces=pieces, failures=failures)
            return
        pieces.append((lo, hi, table))

    def _read(self, lines: list[bytes], offsets: list[int]) -> pa.Table:
        data = b"\n".join(lines)
        try:
            # Arrow's reader lets bytes that are not UTF-8 through into string columns, and
            # the seal then fails on them for good. One check of the block: a failing block
            # is split until the records at fault are found, as for other parse errors.
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise pa.ArrowInvalid(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
        if self._times:
            try:
                table = self._read_times(data, self._as_numbers)
            except (pa.ArrowInvalid, pa.ArrowTypeError, _NotEpochMsError) as first:
                try:
                    table = self._read_times(data, not self._as_numbers)
                except (pa.ArrowInvalid, pa.ArrowTypeError, _NotEpochMsError) as second:
                    # The reason given: a number out of range, else what reading as text said.
                    as_text = second if self._as_numbers else first
                    ranged = [e for e in (first, second) if isinstance(e, _NotEpochMsError)]
                    raise (ranged or [as_text])[0] from None
                self._as_numbers = not self._as_numbers
        else:
            table = self._read_inferred(lines, offsets, _pinned(self.known))
        if table.num_rows != len(lines):
            raise _RowCountError(f"{len(lines)} messages gave {table.num_rows} rows")
        if self.declared is None:
            self.known = _widen([self.known, table.schema])
        return table

    def _read_json(self, data: bytes, explicit: pa.Schema | None) -> pa.Table:
        options = pajson.ParseOptions(
            explicit_schema=explicit,
            unexpected_field_behavior="ignore" if self.declared is not None else "infer",
        )
        read = pajson.ReadOptions(block_size=max(len(data) + 1, 1 << 16), use_threads=False)
        return pajson.read_json(pa.BufferReader(data), read_options=read, parse_options=options)

    def _read_inferred(
        self, lines: list[bytes], offsets: list[int], pinned: pa.Schema | None
    ) -> pa.Table:
        """A block of an inferred schema, integers beyond int64 exact, text kept as text.

        Arrow's reader types text like `2024-01-01` or `2024-01-01T10:00:00Z` as
        timestamp[s]: the field was then pinned to it, and every later value with fractions
        of a second, without a zone's format, or any other text, was poison. JSON has no
        time type; a field meant as one is declared in the topic's `schema`.
        """
        data = b"\n".join(lines)
        read_with = pinned
        try:
            table = self._read_json(data, pinned)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            floated = self._floated(data, pinned)
            if floated is None:
                raise
            pinned = floated
            table = self._read_json(data, pinned)
        exact = self._exact(table, read_with, lines, offsets)
        if exact is not None:
            table = self._read_json(data, exact)
        texted = _texted(table.schema, pinned)
        if texted.equals(table.schema):
            return table
        return self._read_json(data, texted)

    def _exact(
        self, table: pa.Table, pinned: pa.Schema | None, lines: list[bytes], offsets: list[int]
    ) -> pa.Schema | None:
        """The schema to read the block with again when it holds integers beyond int64
        where Arrow read doubles that `pinned` did not hold (decimal(38, 0) there); None when
        it holds none. Integers beyond 38 digits stay doubles, logged once per field."""
        places = [p for p in float_places(table.schema, pinned) if holds_large(table, p)]
        if not places:
            return None
        found = integers_at(lines, places)
        for place, line in found.beyond.items():
            name = place_name(place)
            if name in self._rounded:
                continue
            self._rounded.add(name)
            where = {} if self.topic is None else {"topic": self.topic}
            log.warning(
                "json_integer_rounded",
                **where,
                offset=offsets[line],
                field=name,
                reason="an integer beyond 38 digits: the field is a double, its integers "
                "rounded (declare the field `string` to keep them exact)",
            )
        return with_exact(table.schema, found.exact) if found.exact else None

    def _floated(self, data: bytes, pinned: pa.Schema | None) -> pa.Schema | None:
        """`pinned` with float64 for each inferred int64 or decimal field that the block
        holds numbers with a fraction in, in a column or inside a struct or list; None when
        there is none. (An integer beyond int64, or beyond 38 digits, reads as float64 here
        too: `_exact` tells them apart.)

        JSON has one number type, and a field written as `12` in one record is often `12.5`
        in another: Arrow infers float64 for both in one block, so pinning the first block's
        int64 made such records poison or not depending on how they were batched. Any other
        change of type stays one (the caller bisects the block), as do declared types.
        """
        if self.declared is not None or pinned is None:
            return None
        if not any(_has_exact(f.type) for f in pinned):
            return None
        try:
            inferred = self._read_json(data, None).schema
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None  # a change of kind in the block itself: bisected
        floated = pa.schema(
            [
                f.with_type(_floats_met(f.type, inferred.field(f.name).type))
                if inferred.get_field_index(f.name) >= 0
                else f
                for f in pinned
            ]
        )
        return None if floated.equals(pinned) else floated

    def _read_times(self, data: bytes, as_numbers: bool) -> pa.Table:
        """A block of a declared schema, its timestamps read as text or as epoch ms."""
        assert self.declared is not None
        if not as_numbers:
            return self._read_json(data, self.declared)
        numbers = pa.schema(
            [f.with_type(pa.float64()) if f.name in self._times else f for f in self.declared]
        )
        table = self._read_json(data, numbers)
        for name in self._times:
            stamps, bad = epoch_ms(table.column(name).combine_chunks(), name)
            if bad:  # the block is split until this record is alone, and poison
                raise _NotEpochMsError(bad[min(bad)])
            table = table.set_column(table.schema.get_field_index(name), name, stamps)
        return table

    def _build(
        self, table: pa.Table, records: pa.RecordBatch, rows: list[int], result: Decoded
    ) -> None:
        """`table` holds the decoded rows `rows` of `records`, in order."""
        timestamps = None
        bad = twins({name: table.column(name) for name in table.column_names})
        if self.timestamp_field is not None:
            timestamps, late = event_times(table, self.timestamp_field)
            bad = {**late, **bad}
        if bad:
            keep = pa.array([i for i in range(len(rows)) if i not in bad], pa.int64())
            for i in sorted(bad):
                result.poison.append(poison_at(records, rows[i], bad[i]))
            table = table.take(keep)
            timestamps = None if timestamps is None else timestamps.take(keep)
            rows = [rows[i] for i in keep.to_pylist()]
        if not rows:
            return
        columns = kept_columns(
            records, self.kept, rows=pa.array(rows, pa.int64()), timestamps=timestamps
        )
        columns.update(
            renamed({name: table.column(name).combine_chunks() for name in table.column_names})
        )
        result.batches.append(pa.RecordBatch.from_pydict(columns))


class _RowCountError(ValueError):
    pass


class _NotEpochMsError(ValueError):
    pass


def _one_line(value: bytes | None) -> tuple[bytes, str | None]:
    if value is None:
        return b"", "null value (tombstone) in a json topic"
    stripped = value.strip()
    if not stripped:
        return b"", "empty value in a json topic"
    if stripped.count(b"[") + stripped.count(b"{") > MAX_DEPTH and _depth(stripped) > MAX_DEPTH:
        # Arrow's reader recurses into nesting (a record 20,000 levels deep crashed the
        # process) and its IPC writer refuses more than 64 levels at the seal.
        return b"", f"JSON nested deeper than {MAX_DEPTH} levels"
    if b"\n" in stripped or b"\r" in stripped:
        # Pretty-printed JSON: compact it so that one message is one line.
        try:
            stripped = json.dumps(json.loads(stripped), separators=(",", ":")).encode()
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            return b"", f"not JSON: {exc}"
    if not stripped.startswith(b"{"):
        # Arrow's reader takes a top-level `null` as a row of nulls next to other rows, and
        # crashes the process on a block of nothing else; numbers, strings and arrays it
        # refuses, but only after parsing.
        return b"", f"not a JSON object: {stripped[:40]!r}"
    return stripped, None


MAX_DEPTH = 60


def _depth(data: bytes) -> int:
    """How deep objects and arrays nest in a JSON text (brackets in strings not counted)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _pinned(known: pa.Schema | None) -> pa.Schema | None:
    """The fields whose types later records must keep: those seen with a value.

    A field seen only as null (or an empty list) has no type yet; pinning it to null would
    make every later record with a value for it poison.
    """
    if known is None:
        return None
    return pa.schema([f for f in known if not _has_null(f.type)])


def _texted(schema: pa.Schema, pinned: pa.Schema | None) -> pa.Schema:
    """`schema` with the timestamps Arrow inferred as strings (those pinned stay)."""
    kept = {} if pinned is None else {f.name: f.type for f in pinned}
    return pa.schema([f.with_type(_text_type(f.type, kept.get(f.name))) for f in schema])


def _text_type(dtype: pa.DataType, pinned: pa.DataType | None) -> pa.DataType:
    if pinned is not None and dtype.equals(pinned):
        return dtype
    if pa.types.is_timestamp(dtype):
        return pa.string()
    if pa.types.is_list(dtype):
        inner = pinned.value_type if pinned is not None and pa.types.is_list(pinned) else None
        return pa.list_(dtype.value_field.with_type(_text_type(dtype.value_type, inner)))
    if pa.types.is_struct(dtype):
        inner_fields = (
            {pinned.field(i).name: pinned.field(i).type for i in range(pinned.num_fields)}
            if pinned is not None and pa.types.is_struct(pinned)
            else {}
        )
        return pa.struct(
            [
                dtype.field(i).with_type(
                    _text_type(dtype.field(i).type, inner_fields.get(dtype.field(i).name))
                )
                for i in range(dtype.num_fields)
            ]
        )
    return dtype


def _has_exact(dtype: pa.DataType) -> bool:
    """Whether `dtype` has an int64 or a decimal (an inferred integer) in it."""
    if pa.types.is_int64(dtype) or pa.types.is_decimal(dtype):
        return True
    if pa.types.is_list(dtype):
        return _has_exact(dtype.value_type)
    return pa.types.is_struct(dtype) and any(
        _has_exact(dtype.field(i).type) for i in range(dtype.num_fields)
    )


def _floats_met(pinned: pa.DataType, inferred: pa.DataType) -> pa.DataType:
    """`pinned` with float64 wherever it has int64 or a decimal and `inferred` float64."""
    t = pa.types
    if (t.is_int64(pinned) or t.is_decimal(pinned)) and t.is_float64(inferred):
        return inferred
    if t.is_list(pinned) and t.is_list(inferred):
        value = _floats_met(pinned.value_type, inferred.value_type)
        return pa.list_(pinned.value_field.with_type(value))
    if t.is_struct(pinned) and t.is_struct(inferred):
        children = []
        for i in range(pinned.num_fields):
            child = pinned.field(i)
            at = inferred.get_field_index(child.name)
            found = inferred.field(at).type if at >= 0 else child.type
            children.append(child.with_type(_floats_met(child.type, found)))
        return pa.struct(children)
    return pinned


def _has_null(dtype: pa.DataType) -> bool:
    if pa.types.is_null(dtype):
        return True
    return any(_has_null(dtype.field(i).type) for i in range(dtype.num_fields))


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"not a JSON object of the topic's schema: {text[:300]}"


def _widen(schemas: Sequence[pa.Schema | None]) -> pa.Schema:
    """Fields united in first-seen order, types widened; a field is never dropped."""
    present = [s for s in schemas if s is not None]
    return pa.unify_schemas(present, promote_options="permissive") if present else pa.schema([])


def _conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    batches = [conform(b, schema) for b in table.to_batches()]
    return pa.Table.from_batches(batches, schema=schema)
