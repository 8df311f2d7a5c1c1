"""Topics created through the Kafka API (CreateTopics, Metadata or a produce with
auto_create_topics): recorded in the manifest and their partitions opened on a thread, one
creation per topic however many requests ask for it meanwhile."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from bridge.kafka_api.daemon_calls import off_loop
from bridge.kafka_api.owned import OwnedPartitions
from bridge.kafka_api.partition import ProducedPartition
from bridge.kafka_api.topics import ProducedTopics

log = structlog.get_logger(__name__)


class TopicCreation:
    """The creations under way, on the listener's event loop."""

    # A topic whose creation failed is tried again by a Metadata or produce request naming
    # it no sooner than `retry_s` after, twice that after a second failure, and so on up to
    # `retry_max_s`: clients refresh metadata several times a second while a topic answers an
    # error, and each attempt is a manifest write and an error logged.
    retry_s = 1.0
    retry_max_s = 60.0

    def __init__(
        self, topics: ProducedTopics, owned: OwnedPartitions, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.topics = topics
        self.owned = owned
        self.loop = loop
        self.clock: Callable[[], float] = time.monotonic
        self._pending: dict[str, asyncio.Future[int]] = {}  # topics whose partitions open
        # Topics whose last creation failed: when they may be tried again, why, and the
        # pause after the next failure.
        self._failed: dict[str, tuple[float, Exception, float]] = {}

    async def create(self, topic: str, partitions: int | None, created_by: str) -> int:
        """Record a new topic and open its partitions; returns its partition count once
        producers can write it. The partitions are acquired on a thread: thousands of them
        take seconds, and every other connection waits for the event loop meanwhile.
        Requests creating the same topic meanwhile wait for the first one's creation.
        Raises TopicNameError for a name that cannot be created, and what opening the
        partitions raised (`creation_error` answers it), also for `retry_s` after, without
        trying again."""
        count = self.topics.partitions.get(topic)
        if count is not None:
            return count
        failed = self._failed.get(topic)
        if failed is not None and self.paused(topic):
            # Without the traceback of the first raise, which each raise would lengthen.
            raise failed[1].with_traceback(None)
        # Shielded: a request that goes away does not cancel the creation others wait for.
        return await asyncio.shield(self.start(topic, partitions, created_by))

    def start(self, topic: str, partitions: int | None, created_by: str) -> asyncio.Future[int]:
        """The creation of a topic that is not open yet, started now unless it is under way;
        it goes on whether anyone waits for it or not. Raises TopicNameError."""
        creating = self._pending.get(topic)
        if creating is None:
            self.topics.check_name(topic)
            creating = asyncio.ensure_future(self._create(topic, partitions, created_by))
            self._pending[topic] = creating
            creating.add_done_callback(lambda done: self._created(topic, done))
        return creating

    def grow(self, topic: str, count: int) -> asyncio.Future[int]:
        """Open a served topic's partitions up to `count` (more than it has), after any
        creation or growth of it under way; resolves with its partition count once producers
        can write them all, and goes on whether anyone waits for it or not."""
        earlier = self._pending.get(topic)
        growing = asyncio.ensure_future(self._grow(topic, count, earlier))
        self._pending[topic] = growing
        growing.add_done_callback(lambda done: self._created(topic, done))
        return growing

    async def _grow(self, topic: str, count: int, earlier: asyncio.Future[int] | None) -> int:
        if earlier is not None:
            await asyncio.wait([earlier])
        before = self.topics.partitions.get(topic, 0)

        def prepare() -> tuple[int, list[ProducedPartition]]:
            grown = self.topics.record(topic, count, "create_partitions")
            return grown, self.owned.prepare(topic, grown)

        try:
            grown, states = await off_loop(prepare)
        except Exception as exc:
            log.error(
                "topic_partitions_failed",
                topic=topic,
                partitions=before,
                asked=count,
                error=str(exc),
                error_type=type(exc).__name__,
            )
            raise
        self.owned.publish(states)
        self.topics.add(topic, grown)
        log.info("topic_partitions_added", topic=topic, partitions=grown, before=before)
        return grown

    def _created(self, topic: str, done: asyncio.Future[int]) -> None:
        if self._pending.get(topic) is done:  # not a growth queued behind it
            del self._pending[topic]
        # Retrieved here: a request answered before the creation ended does not wait for
        # it, and its failure is logged (topic_open_failed) already.
        if not done.cancelled():
            done.exception()

    def paused(self, topic: str) -> bool:
        """Whether `create` answers the topic's last failure without trying again."""
        failed = self._failed.get(topic)
        return failed is not None and self.clock() < failed[0] and topic not in self._pending

    def creating(self, topic: str) -> bool:
        return topic in self._pending

    async def created(self) -> None:
        """Wait for the topics being created to be open (or to have failed)."""
        await asyncio.gather(*self._pending.values(), return_exceptions=True)

    async def _create(self, topic: str, partitions: int | None, created_by: str) -> int:
        # A topic whose partitions did not open at start is opened with the count it has.
        unopened = self.topics.unopened.get(topic)

        def prepare() -> tuple[int, list[ProducedPartition]]:
            count = self.topics.record(topic, partitions or unopened, created_by)
            return count, self.owned.prepare(topic, count)

        try:
            count, states = await off_loop(prepare)
        except Exception as exc:
            now = self.clock()
            # Names tried once long ago go: auto_create_topics lets clients name any.
            for name, (at, _, _) in list(self._failed.items()):
                if at + self.retry_max_s < now:
                    del self._failed[name]
            _, _, pause = self._failed.get(topic, (0.0, exc, self.retry_s))
            self._failed[topic] = (now + pause, exc, min(pause * 2, self.retry_max_s))
            log.error(
                "topic_open_failed",
                topic=topic,
                error=str(exc),
                error_type=type(exc).__name__,
                retried_after_s=pause,
            )
            raise
        self._failed.pop(topic, None)
        self.owned.publish(states)
        self.topics.add(topic, count)
        if unopened is None:
            log.info("topic_created", topic=topic, partitions=count, created_by=created_by)
        else:
            log.info("topic_opened", topic=topic, partitions=count, opened_by=created_by)
        return count
