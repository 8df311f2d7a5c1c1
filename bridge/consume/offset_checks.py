"""Offsets Kafka hands a worker mid-consume that do not continue a partition's next_offset:
offsets below it (the Kafka partition started over: behind the store), and offsets past it,
which Kafka's consumer skipped (transaction markers, aborted transactions) or its retention
removed (a gap, recorded in the manifest)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaException, TopicPartition

from bridge.consume.batches import Key
from bridge.consume.positions import (
    BEHIND_REASON,
    RECREATED_REASON,
    recreated_fields,
    removed_by_retention,
)
from bridge.consume.state import PartitionState
from bridge.consume.topic_ids import TopicIds
from bridge.ops.telemetry import WorkerTelemetry
from plateau_core import Writer
from plateau_core.manifest import Manifest

log = structlog.get_logger(__name__)

# How long the worker's thread waits for Kafka's answer on a partition's log start.
WATERMARK_TIMEOUT_S = 10.0


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
        # From the last statistics (on_stats): partitions whose fetcher is at an offset with
        # nothing queued for the worker; looked at, then cleared, by advance_past_gaps.
        self._fetching: dict[Key, int] = {}
        # ask_topic_ids' thread, and the ids it found (taken by check_topic_ids).
        self._asking: threading.Thread | None = None
        self._answered: tuple[dict[Key, tuple[str, str] | None], dict[str, str]] | None = None

    def behind_store(self, key: Key, state: PartitionState, first: int) -> None:
        """Kafka handed out offsets below what the store holds: librdkafka started the
        partition over (auto_offset_reset) when its fetch position fell outside the log,
        that is the topic was deleted and created again, or its log cut back, while this
        worker consumed it. Its records below next_offset are not read, as at assignment;
        said once until Kafka reaches next_offset again."""
        if state.behind:
            return
        self._say_behind(key, state, first_offset=first, reason=BEHIND_REASON)
        # The topic now consumed is the one the watermark continues: a later assignment
        # compares with its id, and does not say this again.
        topic_id = self.topic_ids.of([key[0]]).get(key[0])
        if topic_id is not None:
            self.manifest.record_source_topic(state.plateau_topic, key[1], key[0], topic_id)

    def ask_topic_ids(self, partitions: Mapping[Key, PartitionState]) -> None:
        """A source topic deleted and created again while consumed usually shows as offsets
        below next_offset (behind_store); but when the new topic already holds records at
        next_offset by the time the worker fetches there, the fetch just goes on and its
        records below next_offset are passed over without a sign. Its id tells: the ids of
        the partitions' topics are asked on a thread of their own (a slow cluster takes
        seconds to answer, which the worker's loop does not wait for), and compared with
        those recorded with the watermarks by check_topic_ids once they come."""
        if self._asking is not None and self._asking.is_alive():
            return
        # What each partition's watermark was recorded for when asked: one recorded since
        # (an assignment) may be newer than the answer, and is not compared with it.
        recorded = {
            key: self.manifest.source_topic(state.plateau_topic, key[1])
            for key, state in partitions.items()
            if state.positioned
        }
        if not recorded:
            return
        self._asking = threading.Thread(
            target=self._ask, args=(recorded,), name="plateau-topic-ids", daemon=True
        )
        self._asking.start()

    def _ask(self, recorded: dict[Key, tuple[str, str] | None]) -> None:
        self._answered = (recorded, self.topic_ids.of({topic for topic, _ in recorded}))

    def check_topic_ids(self, partitions: Mapping[Key, PartitionState]) -> None:
        """The last ids asked (ask_topic_ids), if they came: a partition's topic with an id
        other than the one recorded with its watermark is said as at assignment, and the new
        id recorded."""
        answered, self._answered = self._answered, None
        if answered is None:
            return
        asked, ids = answered
        for key, state in partitions.items():
            now = ids.get(key[0])
            if now is None or not state.positioned or key not in asked:
                continue
            recorded = self.manifest.source_topic(state.plateau_topic, key[1])
            if recorded is None or recorded == (key[0], now) or recorded != asked[key]:
                continue
            fields = recreated_fields(recorded, key[0], now)
            self._say_behind(key, state, **fields, reason=RECREATED_REASON)
            self.manifest.record_source_topic(state.plateau_topic, key[1], key[0], now)

    def _say_behind(self, key: Key, state: PartitionState, **fields: Any) -> None:
        """Log and count source_behind_store; `behind` keeps the offsets below next_offset
        Kafka hands out next from saying it again."""
        state.behind = True
        self.telemetry.add("errors", ("source_behind_store",))
        log.error(
            "source_behind_store",
            topic=key[0],
            partition=key[1],
            next_offset=state.next_offset,
            **fields,
        )

    def past_removed(self, key: Key, state: PartitionState, offset: int) -> bool:
        """Records fetched for the partition start at `offset`, past next_offset. Compaction,
        transaction markers and aborted transactions leave such gaps; but when Kafka's log
        now starts past next_offset, its retention removed records plateau had not read: a
        gap, recorded as at assignment. librdkafka moved the fetch on per auto_offset_reset;
        past the earliest offset left (latest), the partition is sought back to it, and True
        is returned: the records at `offset` are fetched again after those Kafka still has.

        The fetch that brought the records also brought the log's start, and librdkafka
        keeps it: a cached start at or below next_offset is current, and most such gaps (a
        marker per transaction) cost no request to Kafka."""
        if not state.positioned or offset <= state.next_offset:
            return False
        tp = TopicPartition(*key)
        low, _ = self.consumer.get_watermark_offsets(tp, cached=True)
        if low <= state.next_offset:
            return False
        with contextlib.suppress(KafkaException):  # the last fetch's figure will do
            low, _ = self.consumer.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT_S)
        return self._past(key, state, offset, low)

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
        fetching, self._fetching = self._fetching, {}
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
        for key, offset in fetching.items():
            state = active.get(key)
            if state is not None and state.positioned and offset > state.next_offset:
                self._reset_past(key, state, offset)

    def on_stats(self, stats: Mapping[str, Any]) -> None:
        """librdkafka's statistics (every statistics.interval.ms): where each partition's
        fetcher is, for those with nothing queued for the worker."""
        fetching: dict[Key, int] = {}
        for topic, entry in stats.get("topics", {}).items():
            for partition, fetch in entry.get("partitions", {}).items():
                if fetch.get("fetch_state") == "active" and fetch.get("fetchq_cnt") == 0:
                    fetching[(topic, int(partition))] = int(fetch.get("next_offset", -1))
        self._fetching = fetching

    def _reset_past(self, key: Key, state: PartitionState, offset: int) -> None:
        """The partition's fetcher is at `offset`, past next_offset, and has handed the
        worker nothing it has not taken: librdkafka reset it there (auto_offset_reset
        latest) when retention removed next_offset, and no record since has shown it, nor
        does the consumer's position, which only records taken move. Kafka's log start
        tells: past next_offset, the removed records are a gap and the partition is sought
        back to those Kafka still has. It is asked, not taken from librdkafka's cache: the
        failed fetch left that at -1, and no fetch from the end may have answered yet."""
        try:
            low, _ = self.consumer.get_watermark_offsets(
                TopicPartition(*key), timeout=WATERMARK_TIMEOUT_S
            )
        except KafkaException:
            return  # the next statistics ask again
        self._past(key, state, offset, low)

    def _past(self, key: Key, state: PartitionState, offset: int, low: int) -> bool:
        """The partition goes on at `offset` and Kafka's log starts at `low`: what of the
        span from next_offset retention removed is recorded as a gap; True when the
        partition is sought back to records Kafka still has there."""
        earliest = min(low, offset)
        if earliest <= state.next_offset:
            return False
        removed_by_retention(self.manifest, state.plateau_topic, key, state.next_offset, earliest)
        state.next_offset = earliest
        if offset <= earliest:
            return False
        self.consumer.seek(TopicPartition(key[0], key[1], earliest))
        return True
