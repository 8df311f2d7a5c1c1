"""A stored batch or column as a topic's merged schema has it: columns missing in older
segments as nulls, narrower types widened, clashed columns as JSON text."""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from plateau_core import json_text
from plateau_core.coarsened import coarsened
from plateau_core.errors import PlateauError


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly `schema`'s columns: missing ones as nulls, others cast (widened)."""
    if batch.schema.equals(schema):
        return batch
    arrays = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        arrays.append(conform_column(batch.column(index), field.type, name=field.name))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _Segment(Protocol):
    """What names a segment (the manifest's SegmentRecord, which this layer cannot import)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def id(self) -> int: ...
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def path(self) -> str: ...


class UnrepresentableValueError(PlateauError):
    """A stored value that the topic's merged type of its column cannot hold (seconds past
    the year 294247 beside microseconds). The reader adds the topic and the segment."""

    located = False

    def in_segment(self, segment: _Segment) -> UnrepresentableValueError:
        """The error naming the topic and the segment that holds the value."""
        if self.located:
            return self
        found = UnrepresentableValueError(
            f"topic {segment.topic!r} partition {segment.partition}, segment {segment.id} "
            f"(offsets {segment.start_offset}-{segment.end_offset}, {segment.path}): {self}"
        )
        found.located = True
        return found


def conform_column(column: pa.Array, target: pa.DataType, *, name: str = "") -> pa.Array:
    """A stored column as the merged type `target`: widened, or as JSON text when `target`
    is a string over another type (only a column whose stored types clash is). A value the
    merged type cannot hold raises UnrepresentableValueError naming the column `name`."""
    if column.type == target:
        return column
    if pa.types.is_string(target) and not (
        json_text.is_text(column.type) or pa.types.is_null(column.type)
    ):
        return json_text.as_json_text(column)
    try:
        return _widened(column, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UnrepresentableValueError(
            f"column {name!r} holds a value stored as {column.type} that the topic's merged "
            f"type {target} cannot hold: {exc}"
        ) from exc


def _widened(column: pa.Array, target: pa.DataType) -> pa.Array:
    # Integers a topic widened to a double, in a column or inside a struct, list or map, are
    # rounded to the nearest one, as any reader of the merged type does; a checked cast
    # refused every value beyond 2**53 and left the topic unreadable. Only those are cast
    # unchecked: every other change stays checked.
    floated = _floated(column.type, target)
    if floated != column.type:
        column = column.cast(floated, safe=False)
    return coarsened(column, target).cast(target)


def _floated(stored: pa.DataType, target: pa.DataType) -> pa.DataType:
    """`stored` with the integers that `target` has as floating point made so."""
    t = pa.types
    if t.is_integer(stored) and t.is_floating(target):
        return target
    if t.is_struct(stored) and t.is_struct(target):
        return pa.struct(
            [
                f.with_type(_floated(f.type, target.field(f.name).type))
                if target.get_field_index(f.name) >= 0
                else f
                for f in stored
            ]
        )
    if t.is_map(stored) and t.is_map(target):
        key = stored.key_field.with_type(_floated(stored.key_type, target.key_type))
        item = stored.item_field.with_type(_floated(stored.item_type, target.item_type))
        return pa.map_(key, item, keys_sorted=stored.keys_sorted)
    if (t.is_list(stored) or t.is_large_list(stored)) and (
        t.is_list(target) or t.is_large_list(target)
    ):
        value = stored.value_field.with_type(_floated(stored.value_type, target.value_type))
        return pa.list_(value) if t.is_list(stored) else pa.large_list(value)
    return stored
