"""plateau storage engine: segments, manifest, retention and reading. Never imports Kafka.

store = Store.open("data")
writer = store.writer(WriterPolicy(memory_budget_bytes=256 * MiB))
watermark = writer.acquire("events", 0)
writer.append("events", 0, batch)   # may raise BackpressureError: pause, retry later
writer.flush()
table = store.read("events", time_start=t0, time_end=t1).to_table()
"""

from plateau_core.errors import (
    BackpressureError,
    FlushTimeoutError,
    InvalidInputError,
    ManifestConflictError,
    ManifestUnusableError,
    PartitionLockedError,
    PlateauError,
    SealError,
)
from plateau_core.manifest import PartitionSpan, SegmentRecord, SegmentState
from plateau_core.policies import MiB, RetentionPolicy, RollPolicy, StoreLimits, WriterPolicy
from plateau_core.reader import ReadResult, SegmentCorruptError, SegmentUnavailableError
from plateau_core.retention import Retention, RetentionReport
from plateau_core.store import Store
from plateau_core.writer import SealedSegment, Writer, WriterListener, WriterStats

__all__ = [
    "BackpressureError",
    "FlushTimeoutError",
    "InvalidInputError",
    "ManifestConflictError",
    "ManifestUnusableError",
    "MiB",
    "PartitionLockedError",
    "PartitionSpan",
    "PlateauError",
    "ReadResult",
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
