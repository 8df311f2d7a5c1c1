"""Records whose Arrow rows are built when they are sealed, not when they are appended.

An ingest path that receives records in a form of its own (the Kafka API: record batches
as producers sent them) can append them as LazyRecords: the writer buffers, journals and
orders them by their offsets alone, and a seal builds the rows of all of a partition's
lazy records at once (`materialize`), a few array builds for thousands of records instead
of a few per produced batch. The class says how: `build` makes one batch of rows of several
of its instances, `payload` is what the journal keeps, and the loader registered under its
`kind` makes an instance again from those bytes after a crash.

The engine never looks inside: it knows a lazy item's offsets, row count, size and the
schema (with its fingerprint) its rows will have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol, TypeAlias

import pyarrow as pa

from plateau_core.errors import PlateauError
from plateau_core.schema import OFFSET


class LazyRecords(Protocol):
    kind: ClassVar[str]  # the journal's name for the loader of its payload

    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def num_rows(self) -> int: ...

    @property
    def nbytes(self) -> int:
        """About the memory it holds, for the writer's budget."""
        ...

    @property
    def schema(self) -> pa.Schema:
        """The schema of its rows, as `plateau_core.schema.normalized` leaves it."""
        ...

    @property
    def fingerprint(self) -> str: ...

    def payload(self) -> Sequence[bytes | memoryview | pa.Buffer]:
        """The bytes a loader makes it again from."""
        ...

    @classmethod
    def build(cls, items: Sequence[LazyRecords]) -> pa.RecordBatch:
        """The rows of `items` (all of this class and schema, in offset order), as one
        normalized batch."""
        ...


Item: TypeAlias = pa.RecordBatch | LazyRecords
Loader = Callable[[pa.Buffer], LazyRecords]

_LOADERS: dict[str, Loader] = {}


class UnknownLazyKindError(PlateauError):
    """The journal holds lazy records of a kind no loader was registered for."""


def register(kind: str, loader: Loader) -> None:
    """Make `kind`'s payloads loadable (the journal's replay calls `loader`)."""
    _LOADERS[kind] = loader


def load(kind: str, payload: pa.Buffer) -> LazyRecords:
    loader = _LOADERS.get(kind)
    if loader is None:
        raise UnknownLazyKindError(
            f"the journal holds records of kind {kind!r}, and nothing that can read them is "
            "loaded (they come from plateau's Kafka API: replay them with plateau serve)"
        )
    return loader(payload)


def span(item: Item) -> tuple[int, int] | None:
    """(first offset, last offset) of an item's records; None when it holds none."""
    if not isinstance(item, pa.RecordBatch):
        return (item.first_offset, item.last_offset) if item.num_rows else None
    if item.num_rows == 0:
        return None
    offsets = item.column(OFFSET)
    return offsets[0].as_py(), offsets[item.num_rows - 1].as_py()


# The most lazy records built by one call. A build holds the interpreter lock throughout
# (Arrow's array builders take Python objects), so a seal of a second of 1 KiB records at
# 150 MB/s held it for 150-300 ms in one go and every connection stalled that long; in
# pieces of this size the listener gets the lock back every few milliseconds.
BUILD_BYTES = 8 << 20


def materialize(items: Sequence[Item]) -> list[pa.RecordBatch]:
    """`items` as record batches: each run of lazy records of one class built together, in
    pieces of at most about BUILD_BYTES."""
    found: list[pa.RecordBatch] = []
    run: list[LazyRecords] = []
    held = 0
    for item in items:
        if run and (
            isinstance(item, pa.RecordBatch)
            or type(item) is not type(run[0])
            or held + item.nbytes > BUILD_BYTES
        ):
            found.append(type(run[0]).build(run))
            run, held = [], 0
        if isinstance(item, pa.RecordBatch):
            found.append(item)
        else:
            run.append(item)
            held += item.nbytes
    if run:
        found.append(type(run[0]).build(run))
    return found
