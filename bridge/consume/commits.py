"""Committing what the manifest recorded to Kafka: the offsets the writer queued on
`sealed` (sealed segments' ends, watermarks moved over skipped records), for the
partitions this worker still owns, and Kafka's answers. All on the worker's thread."""

from __future__ import annotations

import queue

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from bridge.consume.batches import Key, describe
from bridge.consume.routes import Routes
from bridge.consume.sealed import Committable
from bridge.consume.state import PartitionState, WorkerStats
from bridge.ops.telemetry import WorkerTelemetry

log = structlog.get_logger(__name__)


class Commits:
    """A worker's offset commits. Made before its consumer, which takes `on_commit` as
    its callback when it is created."""

    def __init__(
        self,
        sealed: queue.SimpleQueue[Committable],
        routes: Routes,
        partitions: dict[Key, PartitionState],
        stats: WorkerStats,
        telemetry: WorkerTelemetry,
    ) -> None:
        self.sealed = sealed
        self.routes = routes
        self.partitions = partitions
        self.stats = stats
        self.telemetry = telemetry
        # The offsets of the synchronous commit waiting for Kafka's answer now: a broker
        # that does not answer holds it, and the worker stopping names them.
        self.waiting: list[TopicPartition] = []

    def commit_sealed(
        self, consumer: Consumer, *, only: set[Key] | None = None, sync: bool = False
    ) -> None:
        """Commit the offsets queued so far (`only`: of those partitions, the others stay
        queued); `sync` waits for Kafka's answer."""
        ends: dict[Key, int] = {}
        keep: list[Committable] = []
        while True:
            try:
                item = self.sealed.get_nowait()
            except queue.Empty:
                break
            topic, partition, offset = item
            source = self.routes.source_of(topic)
            if source is None:
                continue
            key = (source, partition)
            state = self.partitions.get(key)
            if state is not None and (state.watermark is None or offset > state.watermark):
                state.watermark = offset
            if only is not None and key not in only:
                keep.append(item)
                continue
            if only is None and state is None:
                # Lost: another member owns the partition now, and committing this store's
                # offset could move the group's back (another node starts from it).
                continue
            ends[key] = max(ends.get(key, 0), offset)
        for item in keep:
            self.sealed.put(item)
        if not ends:
            return
        offsets = [TopicPartition(t, p, end) for (t, p), end in sorted(ends.items())]
        try:
            if sync:
                self.on_commit(None, self._wait_for(consumer, offsets))
            else:
                consumer.commit(offsets=offsets, asynchronous=True)
            self.stats.commits += 1
        except KafkaException as exc:
            # The manifest already holds these segments; the next commit carries them.
            self.telemetry.add("errors", ("offset_commit_failed",))
            log.warning("offset_commit_failed", error=str(exc), offsets=describe(offsets))
            return
        for tp in offsets:
            log.debug("offsets_committed", topic=tp.topic, partition=tp.partition, offset=tp.offset)

    def _wait_for(self, consumer: Consumer, offsets: list[TopicPartition]) -> list[TopicPartition]:
        """Commit `offsets` and wait for Kafka's answer: what it committed."""
        self.waiting = offsets
        try:
            return consumer.commit(offsets=offsets, asynchronous=False) or []
        finally:
            self.waiting = []

    def on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Kafka's answer to a commit (served from consume(), on the worker's thread)."""
        if error is not None:
            self.telemetry.add("errors", ("offset_commit_failed",))
            return
        for tp in partitions:
            state = self.partitions.get((tp.topic, tp.partition))
            if tp.error is None and tp.offset >= 0 and state is not None:
                state.committed = max(state.committed or 0, tp.offset)
