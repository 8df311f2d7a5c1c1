"""What a Writer tells its owner: sealed segments, failed seals, room freed, watermark
moves (WriterListener, called on writer threads), and the figures it reports (WriterStats)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from plateau_core.errors import JournalFailedError

log = structlog.get_logger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class SealedSegment:
    """A segment that is durable and recorded: its end_offset may be committed to Kafka."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    record_count: int
    size_bytes: int
    path: Path
    seconds: float


class WriterListener(Protocol):
    """What the owner of a Writer is told; the hooks run on writer threads, keep them short."""

    def on_sealed(self, segment: SealedSegment) -> None:
        """A segment is durable and in the manifest."""

    def on_seal_failed(self, topic: str, partition: int, error: Exception) -> None:
        """A seal failed; its records stay buffered and the seal is retried with backoff."""

    def on_capacity(self) -> None:
        """Memory or a partition's writer was released: paused partitions may be resumed."""

    def on_advanced(self, topic: str, partition: int, next_offset: int) -> None:
        """The watermark moved over skipped offsets: `next_offset` may be committed."""

    def on_journaled(self, seq: int) -> None:
        """Every append group numbered up to `seq` is durable in the writer's journal."""

    def on_journal_failed(self, error: JournalFailedError) -> None:
        """The writer's journal stopped on an error: no group from `error.first_seq` on is
        durable or will be, and appends are refused until a restart."""


class NoListener:
    """A WriterListener that hears nothing: a writer's default, and a base for doubles that
    care about a few hooks."""

    def on_sealed(self, segment: SealedSegment) -> None:
        pass

    def on_seal_failed(self, topic: str, partition: int, error: Exception) -> None:
        pass

    def on_capacity(self) -> None:
        pass

    def on_advanced(self, topic: str, partition: int, next_offset: int) -> None:
        pass

    def on_journaled(self, seq: int) -> None:
        pass

    def on_journal_failed(self, error: JournalFailedError) -> None:
        pass


def tell(hook: Callable[..., None], *args: object) -> None:
    """Call a listener's hook on a writer thread. A hook that raises is logged and goes no
    further: raised through a seal, it would leave the seal unfinished and its partition
    stuck for good, with the error lost in the pool."""
    try:
        hook(*args)
    except Exception as exc:
        log.exception("listener_failed", hook=getattr(hook, "__name__", repr(hook)), error=str(exc))


@dataclass(frozen=True)
class WriterStats:
    partitions: int
    buffered_bytes: int
    in_flight_bytes: int
    buffered_rows: int
    seals_in_flight: int
    failing: dict[TopicPartition, str]
