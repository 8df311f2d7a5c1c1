"""The column a data field is stored in when its name is one of plateau's, and the name a
stored column reads as.

Beside the fields, a decoded topic holds plateau's own columns (`offset`, `timestamp`, `key`,
`headers`), and its readers add `partition`. Spark resolves names ignoring case, so a field
`Timestamp` or `Partition` beside them made every reference to `timestamp` or `partition`
ambiguous: such a field is stored with a `_` suffix (`Timestamp` as `Timestamp_`), by the
decoders and by the writer for every batch appended (`write_names`). Segments sealed before
that rule hold it under its own name; every reader reads such a column as the suffixed one
(`read_names`), so a topic's old and new segments give one column. The Spark connector
follows the same rule (StoredNames.java).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import pyarrow as pa

from plateau_core.errors import InvalidInputError
from plateau_core.names import fold_case

# The exact names plateau stores beside the fields of every decoded topic. The writer checks
# their types (plateau_core.schema), so a column of exactly such a name is plateau's own.
OWN = ("offset", "timestamp", "key", "headers")
# Also taken: the column every reader adds.
TAKEN = (*OWN, "partition")


def clashes(name: str, taken: Sequence[str] = TAKEN) -> bool:
    """Whether a field `name` is one of the `taken` columns' names, ignoring case."""
    return fold_case(name) in taken


def stored_name(name: str, taken: Sequence[str] = TAKEN) -> str:
    """The column a field `name` is stored in."""
    return f"{name}_" if clashes(name, taken) else name


class _TwinsError(InvalidInputError):
    """Columns `old` and `new` side by side where `old` is stored or read as `new`: one
    column's values would hide the other's. `where` names the place; `at` names another."""

    why = ""  # what makes `old` become `new`, with {old} and {new}
    advice = ""

    def __init__(self, twins: Sequence[tuple[str, str]], where: str) -> None:
        pairs = "; ".join(
            f"{old!r} and {new!r} ({self.why.format(old=repr(old), new=repr(new))})"
            for old, new in twins
        )
        super().__init__(
            f"{where} holds the columns {pairs}: one column's values would hide the other's. "
            f"{self.advice}"
        )
        self.twins = tuple(twins)
        self.where = where

    def at(self, where: str) -> Self:
        """The error naming `where` instead."""
        located = type(self)(self.twins, where)
        located.__dict__.update(
            {k: v for k, v in self.__dict__.items() if k not in ("twins", "where")}
        )
        return located


class TwinColumnsError(_TwinsError):
    """A segment holds a data column named as one of plateau's columns (stored before the `_`
    suffix rule) and also the suffixed name it reads as. Plateau's writers never store both;
    the reader adds the topic and the segment files (`at`)."""

    why = (
        "{old} was stored before fields named like plateau's columns got a '_' suffix, "
        "and reads as {new}"
    )
    advice = "Rewrite the file with one of them renamed, or remove it"

    def __init__(self, twins: Sequence[tuple[str, str]], where: str = "a segment schema") -> None:
        super().__init__(twins, where)
        # The schema's fingerprint, when raised merging a topic's schemas: the manifest
        # finds the segments written with it.
        self.fingerprint: str | None = None


class TwinFieldsError(_TwinsError):
    """An appended batch holds a data column named like one of plateau's columns and also
    the suffixed name that column is stored in: the segment would make the topic
    unreadable. The writer adds the topic and partition (`at`)."""

    why = "{old} is named like one of plateau's columns ignoring case, so it is stored as {new}"
    advice = "Rename one of them; nothing of this append was stored"

    def __init__(self, twins: Sequence[tuple[str, str]], where: str = "a batch") -> None:
        super().__init__(twins, where)


def read_names(names: Sequence[str]) -> list[str]:
    """The names a segment's columns `names` read as: a data column named like a taken
    column in any case (`partition`, `Timestamp`, `KEY`), which only segments sealed before
    the `_` suffix rule hold, as its suffixed name; plateau's own columns as they are.

    Raises TwinColumnsError when the segment also holds that suffixed name."""
    read, twins = _suffixed(names)
    if twins:
        raise TwinColumnsError(twins)
    return read


def write_names(names: Sequence[str]) -> list[str]:
    """The columns an appended batch's columns `names` are stored in: a data column named
    like a taken column in any case as its suffixed name, as the decoders store a field;
    plateau's own columns, in their exact names, as they are.

    Raises TwinFieldsError when the batch also holds that suffixed name."""
    stored, twins = _suffixed(names)
    if twins:
        raise TwinFieldsError(twins)
    return stored


def _suffixed(names: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """`names` with data columns named like a taken column suffixed, and the (name,
    suffixed name) pairs whose suffixed name is among `names` already."""
    suffixed = [name if name in OWN else stored_name(name) for name in names]
    if suffixed == list(names):
        return suffixed, []
    present = set(names)
    twins = [
        (old, new)
        for old, new in zip(names, suffixed, strict=True)
        if new != old and new in present
    ]
    return suffixed, twins


def read_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` of a segment with its columns named as they read (`read_names`)."""
    names = read_names(schema.names)
    if names == schema.names:
        return schema
    return pa.schema(
        [field.with_name(name) for field, name in zip(schema, names, strict=True)],
        metadata=schema.metadata,
    )
