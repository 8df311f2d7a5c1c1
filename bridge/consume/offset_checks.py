"""Offsets Kafka hands a worker mid-consume that do not continue a partition's next_offset:
offsets below it (the Kafka partition started over: behind the store), and offsets past it,
which Kafka's consumer skipped (transaction markers, aborted transactions) or its retention
removed (a gap, recorded in the manifest)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import structlog
from confluent_kafka import Consumer, KafkaException, TopicPartition

from bridge.consume.batches import Key
from bridge.consume.positions import BEHIND_REASON, removed_by_retention
from bridge.consume.state import PartitionState
from bridge.consume.topic_ids import TopicIds
from bridge.ops.telemetry import WorkerTelemetry
from plateau_core import Writer
from plateau_core.manifest import Manifest

log = structlog.get_logger(__name__)


class OffsetChecks:
    """A worker's checks of the offsets Kafka hands it, on the worker's thread."""

    def __init__(
        self,
        consumer: Consumer,
        manifest: Manifest,
        writer: Writer,
        topic_ids: TopicIds,
        telemetry: WorkerTelemetry,
    ) -> None:
        self.consumer = consumer
        self.manifest = manifest
        self.writer = writer
        self.topic_ids = topic_ids
        self.telemetry = telemetry

    def behind_store(self, key: Key, state: PartitionState, first: int) -> None:
        """Kafka handed out offsets below what the store holds: librdkafka started the
        partition over (auto_offset_reset) when its fetch position fell outside the log,
        that is the topic was deleted and created again, or its log cut back, while this
        worker consumed it. Its records below next_offset are not read, as at assignment;
        said once until Kafka reaches next_offset again."""
        if state.behind:
            return
        state.behind = True
        self.telemetry.add("errors", ("source_behind_store",))
        log.error(
            "source_behind_store",
            topic=key[0],
            partition=key[1],
            next_offset=state.next_offset,
            first_offset=first,
            reason=BEHIND_REASON,
        )
        # The topic now consumed is the one the watermark continues: a later assignment
        # compares with its id, and does not say this again.
        topic_id = self.topic_ids.of([key[0]]).get(key[0])
        if topic_id is not None:
            self.manifest.record_source_topic(state.plateau_topic, key[1], key[0], topic_id)

    def past_removed(self, key: Key, state: PartitionState, offset: int) -> bool:
        """The partition continues at `offset`, past next_offset. Compaction, transaction
        markers and aborted transactions leave such gaps; but when Kafka's log now starts
        past next_offset, its retention removed records plateau had not read: a gap,
        recorded as at assignment. librdkafka moved the fetch on per auto_offset_reset; past
        the earliest offset left (latest), the partition is sought back to it, and True is
        returned: the records at `offset` are fetched again after those Kafka still has."""
        if not state.positioned or offset <= state.next_offset:
            return False
        tp = TopicPartition(*key)
        low, _ = self.consumer.get_watermark_offsets(tp, cached=True)
        if low <= state.next_offset:
            return False
        with contextlib.suppress(KafkaException):  # the last fetch's figure will do
            low, _ = self.consumer.get_watermark_offsets(tp, timeout=10)
        earliest = min(low, offset)
        if earliest <= state.next_offset:
            return False
        removed_by_retention(self.manifest, state.plateau_topic, key, state.next_offset, earliest)
        state.next_offset = earliest
        if offset <= earliest:
            return False
        self.consumer.seek(TopicPartition(key[0], key[1], earliest))
        return True

    def advance_past_gaps(self, partitions: Mapping[Key, PartitionState]) -> None:
        """Move each partition past offsets Kafka's consumer skipped without delivering a
        record: transaction markers, and with read_committed the records of aborted
        transactions.

        Gaps between landed records need nothing; but when a partition ends with them (every
        committed transaction does: its marker is the last offset), neither the watermark
        nor the committed offset would reach the end, and the partition would look stalled
        with records "waiting" forever. The consumer's position is past them; the watermark
        moves there once everything before it is sealed, as it does over skipped poison.
        """
        active = {key: s for key, s in partitions.items() if s.paused_reason is None}
        if not active:
            return
        try:
            positions = self.consumer.position([TopicPartition(t, p) for t, p in active])
        except KafkaException:
            return  # asked again in a second
        for tp in positions:
            key = (tp.topic, tp.partition)
            state = active.get(key)
            if state is None or tp.error is not None or tp.offset <= state.next_offset:
                continue
            if self.past_removed(key, state, tp.offset):
                continue
            self.writer.skip(state.plateau_topic, tp.partition, tp.offset)
            state.next_offset = tp.offset
            state.positioned = True
