"""Policies as frozen dataclasses, validated when built: a value out of its range raises
InvalidInputError naming the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plateau_core.errors import InvalidInputError

Compression = Literal["lz4", "zstd", "none"]
COMPRESSIONS: tuple[Compression, ...] = ("lz4", "zstd", "none")

MiB = 1024 * 1024


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise InvalidInputError(f"{name} must be positive, got {value}")


@dataclass(frozen=True)
class RollPolicy:
    """When a partition's buffer becomes a segment. Whichever limit is reached first."""

    max_rows: int = 1_000_000
    max_bytes: int = 64 * MiB
    max_age_s: float = 10.0  # since the first buffered record arrived

    def __post_init__(self) -> None:
        _positive("roll.max_rows", self.max_rows)
        _positive("roll.max_bytes", self.max_bytes)
        _positive("roll.max_age_s", self.max_age_s)


@dataclass(frozen=True)
class IndexPolicy:
    """What each segment of a topic indexes beyond its promoted statistics: bloom filters of
    the listed columns' values, at false positive rate `fpp`."""

    bloom: tuple[str, ...] = ()
    fpp: float = 0.01

    def __post_init__(self) -> None:
        if not 0 < self.fpp < 1:
            raise InvalidInputError(f"index.fpp must be between 0 and 1, got {self.fpp}")
        for column in self.bloom:
            if not column or column in ("offset", "timestamp"):
                raise InvalidInputError(
                    f"index.bloom: {column!r} cannot have a bloom filter (offset and "
                    "timestamp are pruned by the segment's own spans)"
                )
        if len(set(self.bloom)) != len(self.bloom):
            raise InvalidInputError(f"index.bloom lists a column twice: {list(self.bloom)}")


# The journal's files (plateau_core.journal), and the least its limit may be: below two of
# them, every new file would force seals.
JOURNAL_FILE_BYTES = 16 * MiB
JOURNAL_MIN_BYTES = 2 * JOURNAL_FILE_BYTES


@dataclass(frozen=True)
class WriterPolicy:
    """How a writer buffers and seals, across all the partitions it owns."""

    memory_budget_bytes: int = 512 * MiB  # buffered + being written, all partitions together
    writer_threads: int = 4
    compression: Compression = "lz4"
    # A partition whose data `compression` does not shrink by 5% is written uncompressed,
    # and probed again now and then (plateau_core.adaptive_compression).
    compression_adaptive: bool = True
    min_free_disk_bytes: int = 0
    fsync: bool = True
    retry_backoff_s: float = 0.5  # first retry after a failed seal; doubles up to 30 s
    tick_s: float = 0.1  # how often the max_age timer and retries are checked
    # Seal every partition that is due in one group (one pool task, one manifest
    # transaction) instead of one task each, one group at a time, started by the ticker or
    # `Writer.seal_due()` rather than by each append: a group commit for many small seals,
    # as the produce path's acks=all makes them.
    seal_together: bool = False
    # With seal_together: after a group seals, the next one starts no sooner than the
    # group took (at most this long), so the producers it just answered have time to send
    # their next records and they join it. Under load that makes fewer, larger seals; a
    # record waits at most this much longer. 0: the next group starts at once.
    group_hold_s: float = 0.0
    # A writer with a journal: past this many bytes of journal files, the partitions whose
    # unsealed records keep the oldest files seal early, so that those files can go.
    journal_max_bytes: int = 512 * MiB

    def __post_init__(self) -> None:
        _positive("memory_budget_bytes", self.memory_budget_bytes)
        _positive("journal_max_bytes", self.journal_max_bytes)
        _positive("writer_threads", self.writer_threads)
        _positive("retry_backoff_s", self.retry_backoff_s)
        _positive("tick_s", self.tick_s)
        if self.compression not in COMPRESSIONS:
            raise InvalidInputError(
                f"compression must be one of {', '.join(COMPRESSIONS)}, got {self.compression!r}"
            )
        if self.min_free_disk_bytes < 0:
            raise InvalidInputError("min_free_disk_bytes must not be negative")
        if self.group_hold_s < 0:
            raise InvalidInputError("group_hold_s must not be negative")


@dataclass(frozen=True)
class RetentionPolicy:
    """Per-topic limits; the oldest segments go first. None means no limit."""

    max_bytes: int | None = None
    max_age_s: float | None = None  # by the segment's newest record (time_max)
    max_segments: int | None = None
    require_replicated: bool = False

    def __post_init__(self) -> None:
        _positive("retention.max_bytes", self.max_bytes)
        _positive("retention.max_age_s", self.max_age_s)
        _positive("retention.max_segments", self.max_segments)


@dataclass(frozen=True)
class ConsolidatePolicy:
    """Per topic: runs of small sealed segments of a partition older than `min_age_s` are
    merged into segments of up to `target_bytes`. A segment is small below
    `merge_below_bytes` (None: below the target)."""

    target_bytes: int = 64 * MiB
    min_age_s: float = 60.0  # since the segment was recorded
    merge_below_bytes: int | None = None

    def __post_init__(self) -> None:
        _positive("consolidate.target_bytes", self.target_bytes)
        _positive("consolidate.merge_below", self.merge_below_bytes)
        if self.min_age_s < 0:
            raise InvalidInputError("consolidate.min_age must not be negative")

    @property
    def small_below(self) -> int:
        """Segments of fewer bytes are merged; larger ones are left as they are."""
        below = self.merge_below_bytes
        return self.target_bytes if below is None else min(below, self.target_bytes)


@dataclass(frozen=True)
class StoreLimits:
    """Store-wide limits: the fixed footprint."""

    max_bytes: int | None = None  # segments plus the manifest's files
    min_free_disk_bytes: int | None = None
    deletion_grace_s: float = 300.0  # how long a deleting segment stays for running readers

    def __post_init__(self) -> None:
        _positive("max_bytes", self.max_bytes)
        _positive("min_free_disk_bytes", self.min_free_disk_bytes)
        if self.deletion_grace_s < 0:
            raise InvalidInputError("deletion_grace_s must not be negative")
