"""What the writer tells a worker, on the writer's threads: sealed segments and watermark
moves, queued as offsets the worker may commit to Kafka."""

from __future__ import annotations

import queue
import threading

from bridge.ops.telemetry import WorkerTelemetry
from plateau_core import SealedSegment
from plateau_core.errors import JournalFailedError

Committable = tuple[str, int, int]  # (plateau topic, partition, offset to commit)


class SealListener:
    """The worker's WriterListener: queues what may be committed to Kafka, for the worker
    thread to commit: the ends of sealed segments, and watermarks moved over skipped
    records."""

    def __init__(
        self,
        sealed: queue.SimpleQueue[Committable],
        wake: threading.Event,
        telemetry: WorkerTelemetry,
    ) -> None:
        self.sealed = sealed
        self.wake = wake
        self.telemetry = telemetry

    def on_sealed(self, segment: SealedSegment) -> None:
        self.sealed.put((segment.topic, segment.partition, segment.end_offset))
        self.telemetry.sealed(
            segment.topic,
            segment.partition,
            segment.record_count,
            segment.size_bytes,
            segment.seconds,
        )

    def on_seal_failed(self, topic: str, partition: int, error: Exception) -> None:
        self.telemetry.add("errors", ("seal_failed",))

    def on_capacity(self) -> None:
        self.wake.set()

    def on_advanced(self, topic: str, partition: int, next_offset: int) -> None:
        self.sealed.put((topic, partition, next_offset))

    def on_journaled(self, seq: int) -> None:
        pass  # the worker's writer keeps no journal: Kafka is its durable buffer

    def on_journal_failed(self, error: JournalFailedError) -> None:
        pass  # no journal, as above
