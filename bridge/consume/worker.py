"""One consumer worker: Kafka partitions in, sealed plateau segments out, offsets committed
only after the manifest recorded them.

The loop: poll a batch, group it by partition, decode, append to the writer. An append the
writer refuses pauses that partition and seeks it back to the first refused record; it is
resumed when the writer accepts again. Sealed segments come back through the listener and
their end offsets are committed to Kafka from this thread.
"""

from __future__ import annotations

import itertools
import json
import operator
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import structlog
from confluent_kafka import KafkaError, KafkaException, Message

from bridge.config.models import Config
from bridge.consume.assignment import Assignment
from bridge.consume.batches import Key, by_partition, describe
from bridge.consume.client import ConsumerFactory
from bridge.consume.commits import Commits
from bridge.consume.dlq import DeadLetters
from bridge.consume.health import ClientHealth
from bridge.consume.landing import Landing
from bridge.consume.offset_checks import OffsetChecks
from bridge.consume.pauses import Pauses
from bridge.consume.routes import Routes
from bridge.consume.sealed import Committable
from bridge.consume.snapshot import worker_snapshot
from bridge.consume.state import PartitionState, WorkerStats
from bridge.consume.topic_ids import TopicIds
from bridge.errors import BridgeError
from bridge.ops.telemetry import WorkerTelemetry
from bridge.ops.thread_names import name_os_threads
from bridge.ops.worker_status import StatusFile
from bridge.store import consolidator_for
from plateau_core import FlushTimeoutError, Store, Writer

log = structlog.get_logger(__name__)
# How long consume() waits for a full poll_batch. A full batch returns at once; this bounds
# how long a quiet topic's first records wait, at start-up too. 100 ms of waiting is
# 100,000 records at the rates where a worker's CPU matters, so batches stay full there.
POLL_WAIT_S = 0.1
PAUSED_POLL_WAIT_S = 0.05
# How often a worker asks the cluster for its source topics' ids (a describe by a short-lived
# admin client, on a thread of its own): a topic deleted and created again while consumed is
# said within this.
TOPIC_ID_CHECK_S = 30.0


class Worker:
    """Consumes its subscriptions into `writer` until `stop` is set.

    It is given what it talks to (build_worker in bridge/consume/build.py wires them): the
    writer, whose listener puts the offsets the worker may commit on `sealed` and sets
    `wake` when room frees; the dead-letter sink; the status file and telemetry it reports
    to; and `consumer`, called once with the worker's callbacks, which librdkafka takes
    only when a consumer is created.
    """

    def __init__(
        self,
        config: Config,
        store: Store,
        stop: threading.Event,
        *,
        consumer: ConsumerFactory,
        writer: Writer,
        sealed: queue.SimpleQueue[Committable],
        wake: threading.Event,
        dead_letters: DeadLetters,
        status: StatusFile,
        telemetry: WorkerTelemetry,
        name: str = "worker-0",
    ) -> None:
        self.config = config
        self.store = store
        self.stop = stop
        self.name = name
        self.stats = WorkerStats()
        self.telemetry = telemetry
        self._status = status
        self.health = ClientHealth(name, config.kafka.bootstrap_servers, telemetry)
        self._gaps_due = 0.0
        # Assignment checks the topic ids: the first check while consuming comes later.
        self._ids_due = time.monotonic() + TOPIC_ID_CHECK_S
        self._sealed = sealed
        self._wake = wake
        self.writer = writer
        self._consolidator = consolidator_for(config, store, writer, telemetry)
        self._routes = Routes(config, store.manifest)
        self.partitions: dict[Key, PartitionState] = {}
        self._dead_letters = dead_letters
        # Whether Kafka answered the final commit and close in time (set when stopping).
        self.kafka_answered = True
        self._commits = Commits(sealed, self._routes, self.partitions, self.stats, telemetry)
        self.consumer = consumer(
            {
                "on_commit": self._commits.on_commit,
                "error_cb": self.health.on_error,
                "stats_cb": self._on_stats,
            }
        )
        self._pauses = Pauses(self.consumer, writer, wake, self.stats, telemetry)
        self._topic_ids = TopicIds(config, f"plateau-{name}")
        self._offsets = OffsetChecks(
            self.consumer, store.manifest, writer, self._topic_ids, telemetry
        )
        self._landing = Landing(
            self._routes,
            writer,
            pauses=self._pauses,
            dead_letters=dead_letters,
            stats=self.stats,
            telemetry=telemetry,
        )
        self._assignment = Assignment(
            config,
            name,
            manifest=store.manifest,
            writer=writer,
            routes=self._routes,
            partitions=self.partitions,
            pauses=self._pauses,
            telemetry=telemetry,
            topic_ids=self._topic_ids,
            commit_revoked=lambda keys: self._commit_sealed(only=keys, sync=True),
            resumed=self._sealed.put,
        )

    def _on_stats(self, document: str) -> None:
        """librdkafka's statistics, every statistics.interval.ms, from consume()."""
        try:
            stats = json.loads(document)
        except ValueError:
            return
        self.health.on_stats(stats)
        self._offsets.on_stats(stats)

    def subscriptions(self) -> list[str]:
        return [
            f"^({m.source.removeprefix('regex:')})$" if m.is_regex else m.source
            for m in self.config.consumed
            if m.source is not None
        ]

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """Consume until `stop` is set; then seal, commit and close within the deadline."""
        self.consumer.subscribe(
            self.subscriptions(),
            on_assign=self._assignment.on_assign,
            on_revoke=self._assignment.on_revoke,
            on_lost=self._assignment.on_lost,
        )
        log.info("worker_started", worker=self.name, subscriptions=self.subscriptions())
        self._consolidator.start(self.config.storage.consolidate_interval)
        batch_size = self.config.kafka.poll_batch
        try:
            while not self.stop.is_set():
                self._pauses.resume_ready(self.partitions)
                paused = any(s.paused_reason for s in self.partitions.values())
                wait = PAUSED_POLL_WAIT_S if paused else POLL_WAIT_S
                messages = self.consumer.consume(batch_size, timeout=wait)
                self._commit_sealed()
                if messages:
                    self._ingest(messages)
                if time.monotonic() >= self._gaps_due:
                    self._gaps_due = time.monotonic() + 1.0
                    self._offsets.advance_past_gaps(self.partitions)
                    self._assignment.set_up_waiting(self.consumer)
                    self._offsets.check_topic_ids(self.partitions)
                if time.monotonic() >= self._ids_due and self.health.down is None:
                    self._ids_due = time.monotonic() + TOPIC_ID_CHECK_S
                    self._offsets.ask_topic_ids(self.partitions)
                if self._status.due():
                    self._status.write(self.snapshot())
                    name_os_threads()
        finally:
            self._shutdown()

    def _ingest(self, messages: Sequence[Message]) -> None:
        for key, fetched in by_partition(self._without_errors(messages)):
            state = self.partitions.get(key)
            if state is None or state.paused_reason is not None:
                continue  # fetched before a revoke or a pause: it is fetched again later
            # A consumed message without an error always has an offset.
            offsets = cast(list[int], list(map(Message.offset, fetched)))
            fresh = fetched
            if min(offsets) < state.next_offset:  # offsets the store holds already
                fresh = list(itertools.compress(fetched, (o >= state.next_offset for o in offsets)))
                self._offsets.behind_store(key, state, min(offsets))
            if fresh:
                state.behind = False
                if self._offsets.past_removed(key, state, cast(int, fresh[0].offset())):
                    continue  # fetched again from Kafka's earliest offset
                self._landing.land(key, state, fresh)
                state.positioned = True

    def _without_errors(self, messages: Sequence[Message]) -> Sequence[Message]:
        errors = list(map(Message.error, messages))
        # Not errors.count(None): KafkaError's == raises when compared with None.
        if all(map(operator.is_, errors, itertools.repeat(None))):
            return messages
        for message, error in zip(messages, errors, strict=True):
            if error is not None:
                self._consumer_error(error, message)
        return [m for m, error in zip(messages, errors, strict=True) if error is None]

    # --- offsets -------------------------------------------------------------------------------

    def _commit_sealed(self, *, only: set[Key] | None = None, sync: bool = False) -> None:
        self._commits.commit_sealed(self.consumer, only=only, sync=sync)

    def snapshot(self) -> dict[str, Any]:
        """This worker's partitions, offsets, pauses and counters, as JSON-able data."""
        return worker_snapshot(
            self.name,
            self.partitions,
            # Left alone once the close is given up: it holds the consumer's other calls.
            self.consumer if self.kafka_answered else None,
            self.writer,
            kafka_down=self.health.down,
            telemetry=self.telemetry,
        )

    # --- errors and shutdown ----------------------------------------------------------------

    def _consumer_error(self, error: KafkaError, message: Message) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        if error.fatal():
            raise BridgeError(f"fatal Kafka error: {error}")
        self.telemetry.add("errors", ("consumer_error",))
        log.warning(
            "consumer_error",
            topic=message.topic(),
            partition=message.partition(),
            error=str(error),
            code=error.name(),
        )

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.config.shutdown_timeout
        self._consolidator.stop()  # before partitions are released
        try:
            self.writer.flush(timeout_s=self.config.shutdown_timeout)
        except FlushTimeoutError as exc:
            self.telemetry.add("errors", ("shutdown_flush_timeout",))
            log.error("shutdown_flush_timeout", error=str(exc))
        self.kafka_answered = self._leave_kafka(deadline)
        self.writer.close(timeout_s=max(1.0, deadline - time.monotonic()))
        self._dead_letters.close()
        self._status.write({**self.snapshot(), "stopped": True})
        log.info(
            "worker_stopped",
            worker=self.name,
            records=self.stats.records,
            poison=self.stats.poison,
            commits=self.stats.commits,
            kafka_answered=self.kafka_answered,
        )

    def _leave_kafka(self, deadline: float) -> bool:
        """Commit what is sealed and close the consumer (it revokes: partitions are released
        and committed, and the group is left) on a thread of its own; False when that was
        not done by `deadline` (at least a second from now).

        A broker that does not answer (frozen, or gone behind a connection still open)
        holds a commit, and a close after one, until it answers again, which may be never.
        Giving up loses nothing: the records are in the manifest, and its watermark, not
        the group's committed offset, is where this store's partitions start again."""
        done = threading.Event()
        failed: list[BaseException] = []
        states = dict(self.partitions)  # the close's revoke empties self.partitions

        def leave() -> None:
            try:
                self._commit_sealed(sync=True)
                self.consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("consumer_close_failed", error=str(exc))
            except BaseException as exc:  # raised again on the worker's thread, as before
                failed.append(exc)
            finally:
                done.set()

        threading.Thread(target=leave, name=f"{self.name}-close", daemon=True).start()
        answered = done.wait(max(1.0, deadline - time.monotonic()))
        if failed:
            raise failed[0]
        if answered:
            return True
        waiting = list(self._commits.waiting)
        for tp in waiting:
            state = states.get((tp.topic, tp.partition))
            log.warning(
                "offset_commit_skipped",
                topic=tp.topic,
                partition=tp.partition,
                offset=tp.offset,
                committed=None if state is None else state.committed,
                worker=self.name,
                reason="Kafka did not answer the commit within shutdown_timeout; the store "
                "holds the records below offset, and the partition starts there again",
            )
        self.telemetry.add("errors", ("shutdown_close_timeout",))
        log.error(
            "shutdown_close_timeout",
            worker=self.name,
            uncommitted=describe(waiting),
            reason="Kafka did not answer the final commit or the close within "
            "shutdown_timeout; the group takes this member's partitions back once its "
            "session times out",
        )
        return False
