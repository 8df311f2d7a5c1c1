"""Which store a produced topic's replica belongs to.

A consumed topic's offsets are Kafka's: whichever store holds (topic, partition, offset), it
is the same record, and several nodes replicate one topic's partitions into one place as
partitions move between them. A produced topic's offsets are numbered by the store, from 0:
a store created again at the same data folder (a new store id) numbers them from 0 again, so
they name other records than the ones a replica already holds under those offsets. Taking
them for what the replica holds would skip them (Iceberg) or replace the replica's files
(Parquet). So a produced topic's replica records the id of the store that feeds it (in the
Iceberg table's snapshot summaries, in a marker file beside the Parquet files), and another
store's run refuses that topic.

A topic's offsets are the store's own (it counts as produced) unless the store or the
configuration says it is consumed:
- a topic the Kafka API created or the configuration lists without a source
  (`produced_topics` in the manifest) is produced;
- a roll-up topic `{topic}.rollup.{label}` of one of the store's topics follows that topic;
- a topic with a Kafka source recorded for a partition (`source_topics`), or one a
  configured mapping consumes into, is consumed;
- any other topic (written through plateau_core's writer) is produced.
A consumed topic taken for produced is refused loudly at worst; a produced one taken for
consumed would be lost silently, hence the default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

import structlog
from pyarrow import fs

from plateau_core.store import Store
from plateau_spark.errors import ReplicaOwnerError
from plateau_spark.replication.target import Target

log = structlog.get_logger("plateau.replication")

# A topic's Parquet replica names the store feeding it here: readers (Spark, pyarrow's
# datasets) skip files whose names start with "_".
MARKER_FILE = "_plateau_store_id"

Consumed = Callable[[str], bool]


class OffsetOrigins:
    """Which of a store's topics have offsets of the store's own, as the manifest says now
    and `consumed` (the configuration's consumed topics) adds."""

    def __init__(self, store: Store, consumed: Consumed | None = None) -> None:
        manifest = store.manifest
        self._produced = set(manifest.produced_topics())
        self._sourced = manifest.consumed_topics()
        self._topics = set(store.topics())
        self._consumed = consumed or (lambda _topic: False)

    def store_numbered(self, topic: str) -> bool:
        if topic in self._produced:
            return True
        base, marker, _ = topic.rpartition(".rollup.")
        if marker and base in self._topics:
            return self.store_numbered(base)
        return not (topic in self._sourced or self._consumed(topic))


def refuse(topic: str, *, recorded: str, store_id: str, replica: str) -> ReplicaOwnerError:
    """The error refusing `topic` (logged here) whose replica `replica` was fed by store
    `recorded`, not by this one."""
    log.error(
        "replica_of_another_store",
        topic=topic,
        store_id=store_id,
        replica_store_id=recorded,
        target=replica,
    )
    return ReplicaOwnerError(
        {
            topic: (
                f"topic {topic!r} is not replicated: its replica {replica} holds the records "
                f"of store {recorded}, and this store is {store_id}. The topic is produced to "
                "plateau, so its offsets are numbered by the store (a store created again at "
                "the same data folder starts them at 0 again) and name other records than "
                f"the replica's. Replicate topic {topic!r} to another target or table, or "
                "remove its replica there; its segments stay unreplicated until then"
            )
        }
    )


def marker_path(topic: str) -> str:
    return f"{topic}/{MARKER_FILE}"


def read_marker(target: Target, filesystem: fs.FileSystem, topic: str) -> str | None:
    """The store id a topic's Parquet replica records, or None when it records none."""
    try:
        with filesystem.open_input_stream(target.path(marker_path(topic))) as stream:
            return bytes(stream.read()).decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return None


def write_marker(target: Target, filesystem: fs.FileSystem, topic: str, store_id: str) -> None:
    """Record `store_id` as the store feeding the topic's Parquet replica (written whole or
    not at all, like the data files)."""

    def produce(out: IO[bytes]) -> None:
        out.write(f"{store_id}\n".encode())

    target.write(filesystem, marker_path(topic), produce)
    log.info("replica_store_recorded", topic=topic, store_id=store_id, target=target.uri)


class ParquetOwners:
    """The Parquet replicas' owners, checked (and recorded for replicas recording none)
    before a run deletes or writes any file of theirs."""

    def __init__(self, store: Store, target: Target, consumed: Consumed | None) -> None:
        self._origins = OffsetOrigins(store, consumed)
        self._store_id = store.manifest.store_id()
        self._target = target

    def claim(self, filesystem: fs.FileSystem, topics: set[str]) -> dict[str, str]:
        """The topics (of `topics`) refused, with why; the others may be replicated."""
        refused: dict[str, str] = {}
        for topic in sorted(topics):
            if not self._origins.store_numbered(topic):
                continue
            recorded = read_marker(self._target, filesystem, topic)
            if recorded is None:
                # A replica written before stores were recorded, or none yet: this store's.
                write_marker(self._target, filesystem, topic, self._store_id)
            elif recorded != self._store_id:
                where = f"{self._target.uri.rstrip('/')}/{topic}"
                error = refuse(topic, recorded=recorded, store_id=self._store_id, replica=where)
                refused.update(error.refused)
        return refused
