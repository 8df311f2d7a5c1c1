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


class Start(NamedTuple):
    """Where an assigned partition starts, and whether its Kafka partition ends before the
    store's watermark (`source_behind_store` was logged)."""

    offset: int
    behind: bool = False


def start_offset(
    consumer: Consumer,
    tp: TopicPartition,
    watermark: int | None,
    *,
    kafka: KafkaConfig,
    manifest: Manifest,
    plateau_topic: str,
) -> Start:
    """The offset to seek `tp` to: the manifest's watermark, or where Kafka's retention
    left the partition when it removed records plateau had not read (a gap, recorded in
    the manifest). A partition without a watermark starts per the configuration. With
    `start_without_watermark: committed` (stores on several nodes), a partition back from
    another node starts where that node's seals took the group's committed offset: its
    records since are in that node's store."""
    if watermark is None:
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
    if high < watermark:
        # The partition ends before what the store already holds of it: the topic was
        # deleted and created again (its offsets start over), or its log was cut back. Its
        # records below the watermark take offsets the store has, and are not read.
        log.error(
            "source_behind_store",
            topic=tp.topic,
            partition=tp.partition,
            next_offset=watermark,
            latest_available=high,
            not_read=min(watermark, high) - low,
            reason=BEHIND_REASON,
        )
    if low > watermark:
        removed_by_retention(manifest, plateau_topic, (tp.topic, tp.partition), watermark, low)
        return Start(int(low))
    return Start(watermark, behind=high < watermark)


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
