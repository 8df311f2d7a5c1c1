"""Pausing a worker's partitions and resuming them: never dropping records, Kafka keeps them.

A partition is paused at an offset (and its consumer seeks back there) when the writer
refuses an append (reasons from BackpressureError) or the schema registry cannot be asked
(`schema_registry`). It is resumed when what paused it has cleared: the writer accepts the
partition again, or the registry answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Final

import structlog
from confluent_kafka import Consumer, TopicPartition

from bridge.consume.batches import Key
from bridge.consume.state import PartitionState, PauseReason, WorkerStats
from bridge.ops.telemetry import WorkerTelemetry
from plateau_core import Writer

log = structlog.get_logger(__name__)

REGISTRY: Final = "schema_registry"  # the pause reason while the schema registry cannot be reached


class Pauses:
    def __init__(
        self,
        consumer: Consumer,
        writer: Writer,
        wake: threading.Event,
        stats: WorkerStats,
        telemetry: WorkerTelemetry,
    ) -> None:
        self.consumer = consumer
        self.writer = writer
        self.wake = wake  # set by the writer when a seal frees capacity
        self.stats = stats
        self.telemetry = telemetry

    def pause(
        self, key: Key, state: PartitionState, offset: int, reason: PauseReason, detail: str
    ) -> None:
        tp = TopicPartition(key[0], key[1], offset)
        self.consumer.pause([tp])
        self.consumer.seek(tp)
        state.paused_reason = reason
        state.paused_since = time.monotonic()
        state.next_offset = offset
        self.stats.pauses[reason] += 1
        self.telemetry.add("pauses", (reason,))
        log.info(
            "partition_paused",
            topic=key[0],
            partition=key[1],
            offset=offset,
            reason=reason,
            detail=detail,
        )

    def resume_ready(self, partitions: Mapping[Key, PartitionState]) -> None:
        if not self.wake.is_set() and not any(s.paused_reason for s in partitions.values()):
            return
        self.wake.clear()
        for key, state in partitions.items():
            if state.paused_reason is None or not self._may_resume(key, state):
                continue
            self.consumer.resume([TopicPartition(key[0], key[1])])
            self.end(state)
            log.info(
                "partition_resumed",
                topic=key[0],
                partition=key[1],
                offset=state.next_offset,
                reason=state.paused_reason,
                paused_s=round(time.monotonic() - state.paused_since, 3),
            )
            state.paused_reason = None
            state.registry_answers = None
            self.stats.resumes += 1

    def _may_resume(self, key: Key, state: PartitionState) -> bool:
        if state.paused_reason == REGISTRY:
            return state.registry_answers is None or state.registry_answers()
        return self.writer.accepting(state.plateau_topic, key[1])

    def end(self, state: PartitionState) -> None:
        """The partition stops being paused (resumed, revoked or lost): count the time."""
        if state.paused_reason is not None:
            seconds = time.monotonic() - state.paused_since
            self.telemetry.add("paused_seconds", (state.paused_reason,), seconds)
