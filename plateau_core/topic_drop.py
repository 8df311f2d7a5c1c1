"""Dropping a topic's segments: the way to free what a topic no configuration names any
more holds, short of waiting for retention to reach it.

Reader-safe and crash-safe as retention's own deletions are: every segment is marked
`deleting` in the manifest first (new reads no longer see it, running ones keep their
snapshot), and retention unlinks its file once the deletion grace has passed, then removes
its row. Partition watermarks stay, so dropped offsets are never landed again. A topic a
writer still owns (serve started with a config naming it, the Kafka API serving a topic
producers created) is refused: its next seals would land beside what was dropped.
"""

from __future__ import annotations

from contextlib import ExitStack

import structlog

from plateau_core.errors import PartitionLockedError
from plateau_core.handle import StoreHandle
from plateau_core.manifest import SegmentRecord, SegmentState, now_ms
from plateau_core.names import partition_dir
from plateau_core.partition_lock import PartitionLock

log = structlog.get_logger(__name__)

# Quarantined segments go too: dropping a topic gives up on all of it.
DROPPABLE = (SegmentState.SEALED, SegmentState.REPLICATED, SegmentState.QUARANTINED)


def drop_topic(store: StoreHandle, topic: str, *, at: int | None = None) -> list[SegmentRecord]:
    """Hand every segment of `topic` to retention, marked deleting at epoch ms `at` (now);
    returns those this call marked, in (partition, start_offset) order.

    Raises:
        PartitionLockedError: A writer owns one of the topic's partitions; nothing is
            marked.
    """
    stamp = now_ms() if at is None else at
    with ExitStack() as held:
        # Every partition's writer lock while marking: no writer seals into the topic
        # meanwhile, and one that owns it now makes the drop refuse instead.
        for span in store.manifest.spans(topic):
            folder = partition_dir(store.data_dir, topic, span.partition)
            try:
                lock = PartitionLock.acquire(folder, timeout_s=0)
            except PartitionLockedError:
                raise PartitionLockedError(
                    f"{topic}[{span.partition}] is owned by a writer: plateau serve still "
                    "writes this topic (started with a config naming it, or its Kafka API "
                    "serves it); restart serve without it, or stop serve, then drop it"
                ) from None
            held.callback(lock.release)
        rows = store.manifest.segments(topic, states=DROPPABLE)
        moved = set(store.manifest.mark_deleting([row.id for row in rows], at=stamp))
    dropped = [row for row in rows if row.id in moved]
    for row in dropped:
        log.info(
            "segment_retired",
            topic=row.topic,
            partition=row.partition,
            start_offset=row.start_offset,
            end_offset=row.end_offset,
            bytes=row.size_bytes,
            reason="topic_dropped",
        )
    if dropped:
        log.warning(
            "topic_dropped",
            topic=topic,
            segments=len(dropped),
            bytes=sum(row.size_bytes for row in dropped),
        )
    return dropped
