"""The produced partitions the listener's writer owns, and each one's state: what the sink
acquires at start (replaying the journal before anything is taken), when a topic is created,
and when a dead-letter partition is first written."""

from __future__ import annotations

import threading

import structlog
from sqlalchemy.exc import SQLAlchemyError

from bridge.config.models import Config
from bridge.config.topics import RollConfig
from bridge.ingest.decode import decoder_for
from bridge.kafka_api.partition import ProducedPartition
from bridge.kafka_api.topics import ProducedTopics
from plateau_core import Store, Writer
from plateau_core.errors import (
    InvalidInputError,
    ManifestUnusableError,
    PartitionLockedError,
)
from plateau_core.journal_files import JOURNAL_DIR
from plateau_core.journal_replay import replay, replay_left
from plateau_core.policies import RollPolicy
from plateau_core.schema_merge import merged_schema

log = structlog.get_logger(__name__)

# Failures of the whole store, not of one topic's partitions.
_OF_THE_STORE = (SQLAlchemyError, PartitionLockedError, ManifestUnusableError)

# Produced partitions seal this often unless their topic sets roll.max_age. With
# durability: segment, acks=all waits for the seal, so this bounds the acknowledgement
# latency (plus the seal's own time); with the journal it bounds how long records take to
# become queryable, and longer means fewer, larger segments (docs/benchmarks.md).
SEAL_AGE_S = {"segment": 0.1, "journal": 1.0}


class OwnedPartitions:
    def __init__(
        self, config: Config, store: Store, topics: ProducedTopics, writer: Writer, durability: str
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.writer = writer
        self.seal_age_s = SEAL_AGE_S[durability]
        self.states: dict[tuple[str, int], ProducedPartition] = {}
        self._owned: set[tuple[str, int]] = set()
        # A topic created through the API has its partitions acquired on a thread, while the
        # event loop may acquire a dead-letter partition of the same name.
        self._owning = threading.Lock()

    def open(self) -> None:
        """Acquire every partition of every produced topic (recovering each folder), replay
        what the journal holds that was not sealed, then make their states.

        A topic created through the API whose partitions do not open is left unopened
        (`ProducedTopics.unopened`) for a later request to try again: one broken folder
        stopped the listener, and every other topic with it. A configured topic, and a
        failure of the store (the manifest, a partition another writer holds), still
        stop the start; so does the journal holding records of an unopened topic, which
        cannot be replayed anywhere else."""
        for topic, count in sorted(self.topics.partitions.items()):
            try:
                for partition in range(count):
                    self._own(topic, partition)
            except Exception as exc:
                if self.topics.configured(topic) or isinstance(exc, _OF_THE_STORE):
                    raise
                log.error(
                    "topic_open_failed",
                    topic=topic,
                    partitions=count,
                    error=str(exc),
                    error_type=type(exc).__name__,
                    retried="by the next request naming it",
                )
                self.topics.unopen(topic)
        timeout_s = max(self.config.shutdown_timeout, 60.0)
        if self.writer.journal is not None:
            replay(self.writer, self._own, timeout_s=timeout_s)
        else:
            # durability: segment now, journal before a crash: what it acknowledged first.
            directory = self.store.data_dir / JOURNAL_DIR
            replay_left(self.writer, self._own, directory, timeout_s=timeout_s)
        for topic, count in sorted(self.topics.partitions.items()):
            self.open_topic(topic, count)

    def open_topic(self, topic: str, count: int) -> None:
        for partition in range(count):
            if (topic, partition) not in self.states:
                self.states[(topic, partition)] = self._state(topic, partition, produced=True)

    def prepare(self, topic: str, count: int) -> list[ProducedPartition]:
        """The states of a new topic's partitions, acquired (off the event loop: some 5 ms a
        partition); `publish` makes them known. Partitions acquired by an earlier attempt
        that failed part way are taken over, not acquired again."""
        return [
            self._state(topic, partition, produced=True)
            for partition in range(count)
            if (topic, partition) not in self.states
        ]

    def publish(self, states: list[ProducedPartition]) -> None:
        for state in states:
            # A dead-letter partition of the same name may have been opened meanwhile.
            self.states.setdefault(state.key, state)

    def dead_letters(self, topic: str, partition: int) -> ProducedPartition:
        """A dead-letter partition's state, acquired on its first letter."""
        found = self.states.get((topic, partition))
        if found is None:
            watermark = self._own(topic, partition)
            mapping = self.topics.mapping(topic)
            found = ProducedPartition(
                topic,
                partition,
                mapping,
                decoder_for(mapping, self.config.schema_registry),
                watermark,
                {},
            )
            self.states[(topic, partition)] = found
        return found

    def _own(self, topic: str, partition: int, *, produced: bool | None = None) -> int:
        """Make the writer own a partition (once); returns the offset its next append takes.
        A produced topic (`produced`, or by default one known) seals by its mapping; any
        other (a dead-letter topic) every `seal_age_s`."""
        key = (topic, partition)
        if produced is None:
            produced = topic in self.topics.partitions
        with self._owning:
            if key in self._owned:
                return self.writer.next_offset(topic, partition)
            if produced:
                mapping = self.topics.mapping(topic)
                watermark = self.writer.acquire(
                    topic,
                    partition,
                    roll=self._roll(topic, produced=True),
                    index=mapping.index.policy(),
                    rollups=mapping.rollup_policies(),
                )
            else:
                watermark = self.writer.acquire(topic, partition, roll=self._roll(topic))
            self._owned.add(key)
        return watermark or 0

    def _roll(self, topic: str, *, produced: bool | None = None) -> RollPolicy:
        if not (topic in self.topics.partitions if produced is None else produced):
            return RollPolicy(max_age_s=self.seal_age_s)
        mapping = self.topics.mapping(topic)
        roll = self.config.roll_policy(mapping)
        if mapping.roll.max_age is None and self.config.defaults.roll.max_age is None:
            roll = RollConfig(max_age=self.seal_age_s).apply(roll)
        return roll

    def _state(self, topic: str, partition: int, *, produced: bool) -> ProducedPartition:
        mapping = self.topics.mapping(topic)
        watermark = self._own(topic, partition, produced=produced)
        decoder = decoder_for(mapping, self.config.schema_registry)
        stored = self.store.manifest.schemas(topic)
        if stored:
            try:
                merged = merged_schema(stored.values())
            except InvalidInputError as exc:  # schemas that cannot be merged: seeded by none
                log.warning("stored_schemas_disagree", topic=topic, error=str(exc))
            else:
                if merged.clashes:  # read as text: the decoder goes on from what it sees
                    log.warning(
                        "stored_schemas_disagree", topic=topic, columns=list(merged.clashes)
                    )
                decoder.seed(merged.settled())
        return ProducedPartition(
            topic,
            partition,
            mapping,
            decoder,
            watermark,
            self.store.manifest.producer_states(topic, partition),
            self._roll(topic, produced=produced).max_age_s,
        )
