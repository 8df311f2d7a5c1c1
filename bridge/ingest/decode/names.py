"""Where a decoded field lands when its name is one of plateau's columns.

Beside the fields, a decoded topic holds plateau's own columns (`offset`, `timestamp`, `key`,
`headers`), and its readers add `partition` (the Spark connector, `plateau query`, the
Parquet and Iceberg replicas). Spark resolves names ignoring case by default, so a field
`Timestamp` or `Partition` beside them made every reference to `timestamp` or `partition`
ambiguous. A field whose name equals one of these ignoring case is stored with a `_` suffix
(`Timestamp` as `Timestamp_`); a record holding such a field and one already named so
(`Timestamp` and `Timestamp_`) would lose one of the two values, and is poison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

# The rule itself is the store's: its readers read older segments by it.
from plateau_core.stored_names import OWN, TAKEN, clashes, stored_name


def field_name(column: str, taken: Sequence[str] = TAKEN) -> str:
    """The field a stored data column holds (`Timestamp_` holds `Timestamp`)."""
    stem = column[:-1]
    return stem if column.endswith("_") and clashes(stem, taken) else column


def seeded_fields(stored: pa.Schema, taken: Sequence[str] = TAKEN) -> list[pa.Field]:
    """The fields a topic's stored columns hold: plateau's own left out, suffixed columns
    named as their fields. Segments written before a name was suffixed hold the field under
    its own name: both map to one field, the first kept."""
    fields: dict[str, pa.Field] = {}
    for column in stored:
        if column.name in OWN:
            continue
        name = field_name(column.name, taken)
        fields.setdefault(name, column.with_name(name))
    return list(fields.values())


def twins(
    columns: Mapping[str, pa.Array | pa.ChunkedArray], taken: Sequence[str] = TAKEN
) -> dict[int, str]:
    """Rows holding a value for a field that is stored with a `_` suffix, in records that
    also have a field of that suffixed name: one value would overwrite the other."""
    bad: dict[int, str] = {}
    for name, column in columns.items():
        renamed = stored_name(name, taken)
        if renamed == name or renamed not in columns:
            continue
        reason = f"fields {name!r} and {renamed!r} both present: {name!r} is stored as {renamed!r}"
        for i, here in enumerate(column.is_valid().to_pylist()):
            if here:
                bad.setdefault(i, reason)
    return bad


def renamed(columns: Mapping[str, pa.Array], taken: Sequence[str] = TAKEN) -> dict[str, pa.Array]:
    """`columns` under the names they are stored in. A field whose suffixed name another
    field has is left out: its rows with a value are poison (`twins`), the rest null."""
    out: dict[str, pa.Array] = {}
    for name, column in columns.items():
        target = stored_name(name, taken)
        if target != name and target in columns:
            continue
        out[target] = column
    return out
