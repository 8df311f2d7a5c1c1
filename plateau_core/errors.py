"""The storage engine's error hierarchy: every error it raises on purpose is a PlateauError."""

from __future__ import annotations

from typing import Literal, get_args

# Why the writer refused an append (BackpressureError.reason). The values are metric labels
# and log fields that alerts may select on: they do not change.
RefusalReason = Literal["partition_busy", "memory_budget", "disk_full"]
REFUSAL_REASONS: tuple[RefusalReason, ...] = get_args(RefusalReason)


class PlateauError(Exception):
    """Root of the errors plateau_core raises on purpose."""


class InvalidInputError(PlateauError, ValueError):
    """A topic name, batch, offset or argument was refused; nothing stored was touched."""


class ManifestConflictError(PlateauError):
    """A manifest change contradicts what is recorded (overlapping segment, lost race)."""


class SealError(PlateauError):
    """Writing a segment or recording it failed; its records stay buffered for a retry."""


class FlushTimeoutError(PlateauError):
    """Some partitions were not sealed before the flush deadline."""

    def __init__(self, pending: list[tuple[str, int]], timeout_s: float) -> None:
        names = ", ".join(f"{t}[{p}]" for t, p in pending)
        super().__init__(f"not sealed within {timeout_s:.1f}s: {names}")
        self.pending = pending


class JournalFailedError(PlateauError):
    """The journal's thread stopped on an error it does not retry (a failed write or sync it
    does retry): no group from `first_seq` on is durable, none will be, and appends are
    refused until a restart replays the groups that are."""

    def __init__(self, first_seq: int, cause: str) -> None:
        super().__init__(
            f"the journal failed at group {first_seq} ({cause}): nothing from there on is "
            "durable, and appends are refused until a restart"
        )
        self.first_seq = first_seq
        self.cause = cause


class PartitionLockedError(PlateauError):
    """Another writer (process or handle) owns the partition."""


class BackpressureError(PlateauError):
    """An append was refused before anything changed; pause and retry when accepting() says so.

    `reason` (a RefusalReason) is "partition_busy" (its buffer is full while its previous
    seal is still being written), "memory_budget" (the store-wide budget of buffered plus
    in-flight bytes is reached) or "disk_full" (free disk is below min_free_disk).
    """

    def __init__(self, topic: str, partition: int, reason: RefusalReason, detail: str) -> None:
        super().__init__(f"{topic}[{partition}] refused ({reason}): {detail}")
        self.topic = topic
        self.partition = partition
        self.reason: RefusalReason = reason
        self.detail = detail


class ManifestUnusableError(PlateauError):
    """The manifest is lost or damaged while segment files exist: opening the store would
    treat every segment as an orphan, so it is refused until the manifest is rebuilt."""

    def __init__(self, data_dir: object, reason: str) -> None:
        super().__init__(
            f"the manifest of {data_dir} {reason}; segment files are intact on disk. Stop "
            "plateau serve and run `plateau rebuild-manifest --config FILE` to rebuild it "
            "from the segment files (or restore manifest.db from a copy)"
        )
        self.data_dir = data_dir
        self.reason = reason
