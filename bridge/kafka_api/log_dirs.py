"""DescribeLogDirs: how many bytes each produced partition holds on disk, and the disk's size
and free space, as `kafka-log-dirs.sh --describe` and admin UIs ask a broker for its
topics' sizes. The store's data folder is plateau's one log directory."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from bridge.kafka_api.daemon_calls import off_loop
from bridge.kafka_api.sink import ProduceSink
from plateau_core import Store


class LogDirsHandler:
    def __init__(self, sink: ProduceSink) -> None:
        self.sink = sink
        self.topics = sink.topics

    async def describe_log_dirs(self, body: Any, allowed: Callable[[str], bool]) -> dict[str, Any]:
        # A topic or partition asked for that is not here is left out, as Kafka leaves it.
        asked = None if body.topics is None else {t.topic: set(t.partitions) for t in body.topics}
        served = {
            topic: count
            for topic, count in self.topics.partitions.items()
            if allowed(topic) and (asked is None or topic in asked)
        }
        store = self.sink.store
        # Manifest reads and a statvfs: off the event loop, as every blocking call.
        sizes, total, free = await off_loop(_sizes_and_disk, store, set(served))
        topics = []
        for topic, count in sorted(served.items()):
            wanted = (
                range(count) if asked is None else sorted(p for p in asked[topic] if 0 <= p < count)
            )
            topics.append(
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": p,
                            "partition_size": sizes.get((topic, p), 0),
                            "offset_lag": self._lag(topic, p),
                            "is_future_key": False,
                        }
                        for p in wanted
                    ],
                }
            )
        return {
            "error_code": ErrorCode.none,
            "results": [
                {
                    "error_code": ErrorCode.none,
                    "log_dir": str(store.data_dir.resolve()),
                    "topics": topics,
                    "total_bytes": total,
                    "usable_bytes": free,
                }
            ],
        }

    def _lag(self, topic: str, partition: int) -> int:
        """Kafka's log end offset less its high watermark: records taken, not durable yet."""
        state = self.sink.partitions.get((topic, partition))
        return 0 if state is None else state.next_offset - state.durable_to


def _sizes_and_disk(store: Store, topics: set[str]) -> tuple[dict[tuple[str, int], int], int, int]:
    """Bytes of each partition's readable segments (of `topics`), and the data folder's
    disk: its size and free bytes."""
    sizes = {(s.topic, s.partition): s.bytes for s in store.spans() if s.topic in topics}
    disk = shutil.disk_usage(store.data_dir)
    return sizes, disk.total, disk.free
