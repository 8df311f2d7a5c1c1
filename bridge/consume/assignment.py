"""The consumer's rebalance callbacks: each assigned partition's lock taken and its start
found (the manifest's watermark, checked against Kafka), partitions whose setup failed kept
paused and set up again later, and revoked or lost ones sealed, committed or let go."""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from confluent_kafka import Consumer, TopicPartition

from bridge.config.models import Config
from bridge.consume.batches import Key
from bridge.consume.pauses import Pauses
from bridge.consume.positions import start_offset
from bridge.consume.routes import Routes
from bridge.consume.sealed import Committable
from bridge.consume.state import PartitionState
from bridge.consume.topic_ids import TopicIds
from bridge.ops.telemetry import WorkerTelemetry
from plateau_core import FlushTimeoutError, Writer
from plateau_core.manifest import Manifest

log = structlog.get_logger(__name__)
# The longest wait between two attempts to set up an assigned partition (doubling from 1 s).
SET_UP_RETRY_MAX_S = 30.0


class Assignment:
    """What a worker holds of its assignment: `partitions` (shared with the worker's loop)
    and the assigned partitions still waiting to be set up."""

    def __init__(
        self,
        config: Config,
        name: str,
        *,
        manifest: Manifest,
        writer: Writer,
        routes: Routes,
        partitions: dict[Key, PartitionState],
        pauses: Pauses,
        telemetry: WorkerTelemetry,
        topic_ids: TopicIds,
        commit_revoked: Callable[[set[Key]], None],
        resumed: Callable[[Committable], None],
    ) -> None:
        self.config = config
        self.name = name
        self.manifest = manifest
        self.writer = writer
        self._routes = routes
        self.partitions = partitions
        self._pauses = pauses
        self.telemetry = telemetry
        self._topic_ids = topic_ids
        self._commit_revoked = commit_revoked  # sealed offsets of revoked partitions, synchronously
        self._resumed = resumed  # where a set-up partition starts, committed with the seals
        # Assigned partitions whose setup failed: (when to try again, attempts so far).
        self._waiting: dict[Key, tuple[float, int]] = {}

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        topic_ids = self._topic_ids.of({tp.topic for tp in partitions})
        lock_wait_s = self.config.shutdown_timeout + 10
        for tp in partitions:
            self._set_up(consumer, tp, topic_ids.get(tp.topic), lock_wait_s)
        # Every partition is assigned, those not set up too: librdkafka would assign them
        # anyway, at the group's committed offset. Those wait paused until set up.
        consumer.incremental_assign(partitions)
        # librdkafka keeps a partition's pause across an unassign and a new assignment: one
        # paused for backpressure before it was revoked would otherwise never be fetched
        # again, while its fresh state here says it is not paused.
        consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in partitions])
        waiting = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        waiting = [tp for tp in waiting if (tp.topic, tp.partition) in self._waiting]
        if waiting:
            consumer.pause(waiting)

    def _set_up(
        self, consumer: Consumer, tp: TopicPartition, topic_id: str | None, lock_wait_s: float
    ) -> bool:
        """Take an assigned partition's lock and find where it starts (tp.offset); False
        when that failed: nothing of it is held then, and it is set up again later."""
        key = (tp.topic, tp.partition)
        # A topic no mapping can land stops the worker, as the config must change first;
        # what follows can pass (a lock held elsewhere, Kafka slow to answer).
        route = self._routes.route(tp.topic)
        acquired: str | None = None
        try:
            watermark = self.writer.acquire(
                route.plateau_topic,
                tp.partition,
                roll=self.config.roll_policy(route.mapping),
                index=route.mapping.index.policy(),
                rollups=route.mapping.rollup_policies(),
                timeout_s=lock_wait_s,
            )
            acquired = route.plateau_topic
            start = start_offset(
                consumer,
                tp,
                watermark,
                kafka=self.config.kafka,
                manifest=self.manifest,
                plateau_topic=route.plateau_topic,
                topic_id=topic_id,
            )
        except Exception as exc:  # the worker goes on; this partition waits, paused
            if acquired is not None:
                self.writer.release(acquired, tp.partition, seal=False)
            attempts = self._waiting.get(key, (0.0, 0))[1] + 1
            retry_in_s = min(SET_UP_RETRY_MAX_S, 2.0 ** (attempts - 1))
            self._waiting[key] = (time.monotonic() + retry_in_s, attempts)
            self.telemetry.add("errors", ("partition_setup_failed",))
            log.error(
                "partition_setup_failed",
                topic=tp.topic,
                partition=tp.partition,
                error=str(exc),
                error_type=type(exc).__name__,
                attempts=attempts,
                retry_in_s=retry_in_s,
                worker=self.name,
            )
            return False
        self._waiting.pop(key, None)
        tp.offset = start.offset
        if start.behind or start.recreated:
            self.telemetry.add("errors", ("source_behind_store",))
        elif start.offset >= 0:
            # The group's committed offset follows the store from the start, not from the
            # next seal: after a stop that could not commit (Kafka not answering) it stayed
            # behind, and lag tools showed lag the store did not have.
            self._resumed((route.plateau_topic, tp.partition, start.offset))
        # Past the watermark when Kafka's retention or another node took the partition
        # further (a gap recorded already); a logical offset without a watermark.
        positioned = start.offset >= 0
        self.partitions[key] = PartitionState(
            route.plateau_topic,
            start.offset if positioned else 0,
            positioned=positioned,
            behind=start.behind,
            watermark=watermark,
            max_age_s=self.config.roll_policy(route.mapping).max_age_s,
        )
        log.info(
            "partition_assigned",
            topic=tp.topic,
            partition=tp.partition,
            plateau_topic=route.plateau_topic,
            next_offset=watermark,
            worker=self.name,
        )
        return True

    def set_up_waiting(self, consumer: Consumer) -> None:
        """Set up again the assigned partitions that failed to, once their backoff is over;
        each then starts over from where its setup says, as at assignment."""
        now = time.monotonic()
        due = [key for key, (at, _) in self._waiting.items() if at <= now]
        if not due:
            return
        topic_ids = self._topic_ids.of({topic for topic, _ in due})
        for topic, partition in due:
            tp = TopicPartition(topic, partition)
            if not self._set_up(consumer, tp, topic_ids.get(topic), 0.0):
                continue
            # Assigned again at its start: what the consumer fetched of it meanwhile (at
            # the committed offset, before the pause took) is dropped.
            consumer.incremental_unassign([TopicPartition(topic, partition)])
            consumer.incremental_assign([tp])
            consumer.resume([TopicPartition(topic, partition)])

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        for topic, partition in sorted(keys):
            state = self.partitions.pop((topic, partition), None)
            if state is None:
                self._waiting.pop((topic, partition), None)
                continue
            self._pauses.end(state)
            try:
                self.writer.release(
                    state.plateau_topic, partition, timeout_s=self.config.shutdown_timeout
                )
            except FlushTimeoutError as exc:
                self.telemetry.add("errors", ("revoke_flush_timeout",))
                log.error("revoke_flush_timeout", topic=topic, partition=partition, error=str(exc))
                self.writer.release(state.plateau_topic, partition, seal=False)
            log.info(
                "partition_revoked",
                topic=topic,
                partition=partition,
                next_offset=self._sealed_to(state.plateau_topic, partition),
                committed=state.committed,
                worker=self.name,
            )
        self._commit_revoked(keys)

    def _sealed_to(self, plateau_topic: str, partition: int) -> int | None:
        """The partition's watermark, for the log line of its revoke or loss; None when the
        manifest does not answer (the rebalance goes on without it)."""
        try:
            return self.manifest.watermark(plateau_topic, partition)
        except Exception as exc:
            log.warning(
                "watermark_unknown",
                topic=plateau_topic,
                partition=partition,
                error=str(exc),
                error_type=type(exc).__name__,
            )
            return None

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._waiting.pop((tp.topic, tp.partition), None)
            state = self.partitions.pop((tp.topic, tp.partition), None)
            offsets: dict[str, int | None] = {}
            if state is not None:
                self._pauses.end(state)
                self.writer.release(state.plateau_topic, tp.partition, seal=False)
                offsets = {
                    "next_offset": self._sealed_to(state.plateau_topic, tp.partition),
                    "appended_to": state.next_offset,
                    "committed": state.committed,
                }
            log.warning("partition_lost", topic=tp.topic, partition=tp.partition, **offsets)
        # Nothing is committed for lost partitions: another member owns them now; their
        # sealed segments (and seals still running) are dropped by the next _commit_sealed.
