"""plateau storage engine: segments, manifest, retention and reading. Never imports Kafka.

store = Store.open("data")
writer = store.writer(WriterPolicy(memory_budget_bytes=256 * MiB))
watermark = writer.acquire("events", 0)
writer.append("events", 0, batch)   # may raise BackpressureError: pause, retry later
writer.flush()
table = store.read("events", time_start=t0, time_end=t1).to_table()

The engine is layered and imports one way: names, schema, checksums, policies, segment
files and the manifest at the bottom; the writer, reader, recovery, verification and
retention above them (they see a store only as a StoreHandle); the Store facade on top.
The names below load their modules when first used, so a command that only needs, say,
the policies does not load SQLAlchemy and Arrow.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plateau_core.errors import (
        REFUSAL_REASONS,
        BackpressureError,
        FlushTimeoutError,
        InvalidInputError,
        ManifestConflictError,
        ManifestUnusableError,
        PartitionLockedError,
        PlateauError,
        RefusalReason,
        SealError,
    )
    from plateau_core.listener import NoListener, SealedSegment, WriterListener, WriterStats
    from plateau_core.manifest import PartitionSpan, SegmentRecord, SegmentState
    from plateau_core.policies import MiB, RetentionPolicy, RollPolicy, StoreLimits, WriterPolicy
    from plateau_core.reader import ReadResult, SegmentCorruptError, SegmentUnavailableError
    from plateau_core.retention import Retention, RetentionReport
    from plateau_core.slog import Append
    from plateau_core.store import Store
    from plateau_core.writer import Writer

_HOMES = {
    "Append": "slog",
    "BackpressureError": "errors",
    "FlushTimeoutError": "errors",
    "InvalidInputError": "errors",
    "ManifestConflictError": "errors",
    "ManifestUnusableError": "errors",
    "PartitionLockedError": "errors",
    "PlateauError": "errors",
    "REFUSAL_REASONS": "errors",
    "RefusalReason": "errors",
    "SealError": "errors",
    "PartitionSpan": "manifest",
    "SegmentRecord": "manifest",
    "SegmentState": "manifest",
    "MiB": "policies",
    "RetentionPolicy": "policies",
    "RollPolicy": "policies",
    "StoreLimits": "policies",
    "WriterPolicy": "policies",
    "ReadResult": "reader",
    "SegmentCorruptError": "reader",
    "SegmentUnavailableError": "reader",
    "Retention": "retention",
    "RetentionReport": "retention",
    "Store": "store",
    "NoListener": "listener",
    "SealedSegment": "listener",
    "Writer": "writer",
    "WriterListener": "listener",
    "WriterStats": "listener",
}

__all__ = [
    "REFUSAL_REASONS",
    "Append",
    "BackpressureError",
    "FlushTimeoutError",
    "InvalidInputError",
    "ManifestConflictError",
    "ManifestUnusableError",
    "MiB",
    "NoListener",
    "PartitionLockedError",
    "PartitionSpan",
    "PlateauError",
    "ReadResult",
    "RefusalReason",
    "Retention",
    "RetentionPolicy",
    "RetentionReport",
    "RollPolicy",
    "SealError",
    "SealedSegment",
    "SegmentCorruptError",
    "SegmentRecord",
    "SegmentState",
    "SegmentUnavailableError",
    "Store",
    "StoreLimits",
    "Writer",
    "WriterListener",
    "WriterPolicy",
    "WriterStats",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'plateau_core' has no attribute {name!r}")
    return getattr(import_module(f"plateau_core.{home}"), name)
