"""Where an assigned partition starts reading: the manifest is the source of truth, Kafka's
committed offset is for lag tools."""

from __future__ import annotations

from typing import NamedTuple

import structlog
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_STORED,
    Consumer,
    KafkaException,
    TopicPartition,
)

from bridge.config.models import KafkaConfig
from plateau_core.manifest import Manifest

log = structlog.get_logger(__name__)

BEHIND_REASON = (
    "the Kafka partition hands out offsets the store already holds: a topic deleted and "
    "created again, or a log cut back; its records below next_offset are not read; map it "
    "to a new plateau topic to keep them"
)
RECREATED_REASON = (
    "the Kafka topic is not the one the store's watermark was recorded for (its topic id "
    "changed: deleted and created again, or the mapping names another topic now); its "
    "records below next_offset are not read; map it to a new plateau topic to keep them"
)


class Start(NamedTuple):
    """Where an assigned partition starts, and whether its Kafka partition ends before the
    store's watermark (`source_behind_store` was logged)."""

    offset: int
    behind: bool = False
    # The topic id differs from the one recorded with the watermark (also logged).
    recreated: bool = False


def start_offset(
    consumer: Consumer,
    tp: TopicPartition,
    watermark: int | None,
    *,
    kafka: KafkaConfig,
    manifest: Manifest,
    plateau_topic: str,
    topic_id: str | None = None,
) -> Start:
    """The offset to seek `tp` to: the manifest's watermark, or where Kafka's retention
    left the partition when it removed records plateau had not read (a gap, recorded in
    the manifest). A partition without a watermark starts per the configuration. With
    `start_without_watermark: committed` (stores on several nodes), a partition back from
    another node starts where that node's seals took the group's committed offset: its
    records since are in that node's store.

    `topic_id` is the Kafka topic's id now (None: unknown); recorded, it tells a topic
    created again while plateau was stopped from the one the watermark belongs to."""
    source = _Source(manifest, plateau_topic, tp, topic_id)
    if watermark is None:
        source.record()
        if kafka.start_without_watermark == "committed":
            return Start(OFFSET_STORED)  # librdkafka falls back to auto.offset.reset
        return Start(OFFSET_BEGINNING if kafka.auto_offset_reset == "earliest" else OFFSET_END)
    if kafka.start_without_watermark == "committed":
        try:
            (found,) = consumer.committed([TopicPartition(tp.topic, tp.partition)], timeout=10)
        except KafkaException as exc:  # the store's own watermark is safe, if not the best
            log.warning(
                "committed_offset_unknown", topic=tp.topic, partition=tp.partition, error=str(exc)
            )
            found = TopicPartition(tp.topic, tp.partition, watermark)
        if found.offset > watermark:
            log.info(
                "partition_landed_elsewhere",
                topic=tp.topic,
                partition=tp.partition,
                next_offset=watermark,
                committed_offset=found.offset,
                reason="another node's store holds the records in between",
            )
            manifest.record_gap(plateau_topic, tp.partition, watermark, found.offset)
            watermark = int(found.offset)
    low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
    recreated: dict[str, str] = {}
    if source.changed is not None:
        recreated = recreated_fields(source.changed, tp.topic, str(topic_id))
    if high < watermark or recreated:
        # The partition ends before what the store already holds of it, or it is another
        # topic than the one the watermark was recorded for: the topic was deleted and
        # created again (its offsets start over), or its log was cut back. Its records
        # below the watermark take offsets the store has, and are not read.
        log.error(
            "source_behind_store",
            topic=tp.topic,
            partition=tp.partition,
            next_offset=watermark,
            latest_available=high,
            not_read=max(0, min(watermark, high) - low),
            **recreated,
            reason=RECREATED_REASON if recreated else BEHIND_REASON,
        )
    if low > watermark:
        removed_by_retention(manifest, plateau_topic, (tp.topic, tp.partition), watermark, low)
    # Only once the change was said: recorded by an attempt that then failed (Kafka not
    # answering), the retry would find the new id the partition's and say nothing.
    source.record()
    if low > watermark:
        return Start(int(low), recreated=bool(recreated))
    return Start(watermark, behind=high < watermark, recreated=bool(recreated))


def recreated_fields(recorded: tuple[str, str], topic: str, topic_id: str) -> dict[str, str]:
    """source_behind_store's fields for a partition whose recorded (Kafka topic, id) is not
    `topic`'s `topic_id`: both ids, and the recorded topic when the mapping names another."""
    recorded_topic, recorded_id = recorded
    fields = {"recorded_topic_id": recorded_id, "topic_id": topic_id}
    if recorded_topic != topic:
        fields["recorded_topic"] = recorded_topic
    return fields


class _Source:
    """The Kafka topic and id recorded as a partition's source, against `tp`'s topic and
    `topic_id` now (None: unknown, nothing is checked or recorded)."""

    def __init__(
        self, manifest: Manifest, plateau_topic: str, tp: TopicPartition, topic_id: str | None
    ) -> None:
        self._manifest, self._plateau_topic, self._tp = manifest, plateau_topic, tp
        self._now = None if topic_id is None else (tp.topic, topic_id)
        found = None if self._now is None else manifest.source_topic(plateau_topic, tp.partition)
        self._recorded = found
        # A partition without one recorded (a manifest from before topic ids were kept, a
        # new partition) takes the current id without an alarm.
        self.changed = found if found is not None and found != self._now else None

    def record(self) -> None:
        if self._now is not None and self._recorded != self._now:
            topic, topic_id = self._now
            self._manifest.record_source_topic(
                self._plateau_topic, self._tp.partition, topic, topic_id
            )


def removed_by_retention(
    manifest: Manifest,
    plateau_topic: str,
    source: tuple[str, int],
    next_offset: int,
    earliest: int,
) -> None:
    """Kafka's retention removed the offsets from `next_offset` up to `earliest` of the
    Kafka partition `source` before plateau read them: a gap, recorded in the manifest."""
    topic, partition = source
    manifest.record_gap(plateau_topic, partition, next_offset, earliest)
    log.warning(
        "offset_gap",
        topic=topic,
        partition=partition,
        next_offset=next_offset,
        earliest_available=earliest,
        missing=earliest - next_offset,
        reason="Kafka's retention removed these records before plateau read them",
    )
