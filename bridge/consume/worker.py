"""One consumer worker: Kafka partitions in, sealed plateau segments out, offsets committed
only after the manifest recorded them.

The loop: poll a batch, group it by partition, decode, append to the writer. An append the
writer refuses pauses that partition and seeks it back to the first refused record; it is
resumed when the writer accepts again. Sealed segments come back through the listener and
their end offsets are committed to Kafka from this thread.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import pyarrow as pa
import structlog
from confluent_kafka import (
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from bridge.config.models import Config
from bridge.consume.assignment import Assignment
from bridge.consume.batches import Key, before, by_partition, describe, from_offset
from bridge.consume.client import ConsumerFactory
from bridge.consume.dlq import DeadLetters
from bridge.consume.health import ClientHealth
from bridge.consume.messages import records_of
from bridge.consume.pauses import REGISTRY, Pauses
from bridge.consume.positions import BEHIND_REASON, removed_by_retention
from bridge.consume.routes import Route, Routes
from bridge.consume.sealed import Committable
from bridge.consume.snapshot import worker_snapshot
from bridge.consume.state import PartitionState, WorkerStats
from bridge.consume.topic_ids import TopicIds
from bridge.errors import BridgeError
from bridge.ingest.decode import Poison, RegistryUnavailableError
from bridge.ops.telemetry import WorkerTelemetry
from bridge.ops.worker_status import StatusFile
from bridge.store import consolidator_for
from plateau_core import (
    BackpressureError,
    FlushTimeoutError,
    Store,
    Writer,
)

log = structlog.get_logger(__name__)
# How long consume() waits for a full poll_batch. A full batch returns at once; this bounds
# how long a quiet topic's first records wait, at start-up too. 100 ms of waiting is
# 100,000 records at the rates where a worker's CPU matters, so batches stay full there.
POLL_WAIT_S = 0.1
PAUSED_POLL_WAIT_S = 0.05


class PoisonStopError(BridgeError):
    """A record failed to decode on a topic with `on_error: fail`."""


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
        self._sealed = sealed
        self._wake = wake
        self.writer = writer
        self._consolidator = consolidator_for(config, store, writer, telemetry)
        self._routes = Routes(config, store.manifest)
        self.partitions: dict[Key, PartitionState] = {}
        self._dead_letters = dead_letters
        self.consumer = consumer(
            {
                "on_commit": self._on_commit,
                "error_cb": self.health.on_error,
                "stats_cb": self.health.on_stats,
            }
        )
        self._pauses = Pauses(self.consumer, writer, wake, self.stats, telemetry)
        self._topic_ids = TopicIds(config, f"plateau-{name}")
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
        )

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
                    self._advance_past_gaps()
                    self._assignment.set_up_waiting(self.consumer)
                if self._status.due():
                    self._status.write(self.snapshot())
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
                self._behind_store(key, state, min(offsets))
            if fresh:
                state.behind = False
                if self._past_removed(key, state, cast(int, fresh[0].offset())):
                    continue  # fetched again from Kafka's earliest offset
                self._land(key, state, fresh)
                state.positioned = True

    def _behind_store(self, key: Key, state: PartitionState, first: int) -> None:
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
        topic_id = self._topic_ids.of([key[0]]).get(key[0])
        if topic_id is not None:
            self.store.manifest.record_source_topic(state.plateau_topic, key[1], key[0], topic_id)

    def _past_removed(self, key: Key, state: PartitionState, offset: int) -> bool:
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
        removed_by_retention(
            self.store.manifest, state.plateau_topic, key, state.next_offset, earliest
        )
        state.next_offset = earliest
        if offset <= earliest:
            return False
        self.consumer.seek(TopicPartition(key[0], key[1], earliest))
        return True

    def _advance_past_gaps(self) -> None:
        """Move each partition past offsets Kafka's consumer skipped without delivering a
        record: transaction markers, and with read_committed the records of aborted
        transactions.

        Gaps between landed records need nothing; but when a partition ends with them (every
        committed transaction does: its marker is the last offset), neither the watermark
        nor the committed offset would reach the end, and the partition would look stalled
        with records "waiting" forever. The consumer's position is past them; the watermark
        moves there once everything before it is sealed, as it does over skipped poison.
        """
        active = {key: s for key, s in self.partitions.items() if s.paused_reason is None}
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
            if self._past_removed(key, state, tp.offset):
                continue
            self.writer.skip(state.plateau_topic, tp.partition, tp.offset)
            state.next_offset = tp.offset
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

    def _land(self, key: Key, state: PartitionState, messages: list[Message]) -> None:
        route = self._routes.known(key[0])
        records = records_of(messages)
        try:
            decoded = route.decoder.decode(records)
        except RegistryUnavailableError as exc:
            # The records wait in Kafka: skipping them would lose data the registry could
            # decode a moment later. Resumed once it answers (asked every retry_interval).
            self._pauses.pause(key, state, records.column("offset")[0].as_py(), REGISTRY, str(exc))
            state.registry_answers = exc.answers
            return
        poison = decoded.poison
        batches = decoded.batches
        if not poison:
            self._append(key, state, batches)
            return
        first = poison[0].offset
        # What comes before the first poison record lands first. What comes after it waits
        # until the poison is handled (in the dead-letter topic, acknowledged): sealed
        # earlier, it would move the watermark past a record a failing dead-letter topic
        # never took, and nothing would read that record again.
        if self._append(key, state, [before(b, first) for b in batches]) is not None:
            return  # held back: the rest is read again when the writer takes more
        if route.mapping.on_error == "fail":
            self.telemetry.add("poison_records", (state.plateau_topic, "fail"))
            raise PoisonStopError(
                f"{key[0]}[{key[1]}] offset {first} cannot be decoded ({poison[0].error}); "
                "on_error is fail, so the worker stops before it"
            )
        # Dead letters are at least once: records the writer holds back below are read and
        # dead-lettered again later.
        self._handle_poison(route, key, state.plateau_topic, records, poison)
        refused_at = self._append(key, state, [from_offset(b, first) for b in batches])
        if refused_at is None:
            last = max(p.offset for p in poison)
            if last + 1 > state.next_offset:
                state.next_offset = last + 1
                self.writer.skip(state.plateau_topic, key[1], last + 1)

    def _append(
        self, key: Key, state: PartitionState, batches: Sequence[pa.RecordBatch]
    ) -> int | None:
        """Hand the batches to the writer; the offset it refused at (the partition is then
        paused there), or None."""
        for batch in batches:
            if batch.num_rows == 0:
                continue
            try:
                self.writer.append(state.plateau_topic, key[1], batch)
            except BackpressureError as exc:
                refused_at: int = batch.column("offset")[0].as_py()
                self._pauses.pause(key, state, refused_at, exc.reason, exc.detail)
                return refused_at
            state.next_offset = batch.column("offset")[batch.num_rows - 1].as_py() + 1
            self.stats.records += batch.num_rows
            self.telemetry.ingested(state.plateau_topic, key[1], batch.num_rows, batch.nbytes)
        return None

    def _handle_poison(
        self,
        route: Route,
        key: Key,
        plateau_topic: str,
        records: pa.RecordBatch,
        poison: list[Poison],
    ) -> None:
        self.stats.poison += len(poison)
        if route.mapping.on_error == "dlq" and route.mapping.dlq:
            self._dead_letters.send(route.mapping.dlq, key, records, poison)
            self.telemetry.add("poison_records", (plateau_topic, "dlq"), len(poison))
            return
        self.telemetry.add("poison_records", (plateau_topic, "skip"), len(poison))
        for item in poison:
            log.warning(
                "record_skipped",
                topic=key[0],
                partition=key[1],
                offset=item.offset,
                error=item.error,
            )

    # --- offsets -------------------------------------------------------------------------------

    def _commit_sealed(self, *, only: set[Key] | None = None, sync: bool = False) -> None:
        ends: dict[Key, int] = {}
        keep: list[Committable] = []
        while True:
            try:
                item = self._sealed.get_nowait()
            except queue.Empty:
                break
            topic, partition, offset = item
            source = self._routes.source_of(topic)
            if source is None:
                continue
            key = (source, partition)
            state = self.partitions.get(key)
            if state is not None and (state.watermark is None or offset > state.watermark):
                state.watermark = offset
            if only is not None and key not in only:
                keep.append(item)
                continue
            if only is None and state is None:
                # Lost: another member owns the partition now, and committing this store's
                # offset could move the group's back (another node starts from it).
                continue
            ends[key] = max(ends.get(key, 0), offset)
        for item in keep:
            self._sealed.put(item)
        if not ends:
            return
        offsets = [TopicPartition(t, p, end) for (t, p), end in sorted(ends.items())]
        try:
            if sync:
                done = self.consumer.commit(offsets=offsets, asynchronous=False)
                self._on_commit(None, done or [])
            else:
                self.consumer.commit(offsets=offsets, asynchronous=True)
            self.stats.commits += 1
        except KafkaException as exc:
            # The manifest already holds these segments; the next commit carries them.
            self.telemetry.add("errors", ("offset_commit_failed",))
            log.warning("offset_commit_failed", error=str(exc), offsets=describe(offsets))
            return
        for tp in offsets:
            log.debug("offsets_committed", topic=tp.topic, partition=tp.partition, offset=tp.offset)

    def snapshot(self) -> dict[str, Any]:
        """This worker's partitions, offsets, pauses and counters, as JSON-able data."""
        return worker_snapshot(
            self.name,
            self.partitions,
            self.consumer,
            self.writer,
            kafka_down=self.health.down,
            telemetry=self.telemetry,
        )

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Kafka's answer to a commit (served from consume(), on this thread)."""
        if error is not None:
            self.telemetry.add("errors", ("offset_commit_failed",))
            return
        for tp in partitions:
            state = self.partitions.get((tp.topic, tp.partition))
            if tp.error is None and tp.offset >= 0 and state is not None:
                state.committed = max(state.committed or 0, tp.offset)

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
        deadline = self.config.shutdown_timeout
        started = time.monotonic()
        self._consolidator.stop()  # before partitions are released
        try:
            self.writer.flush(timeout_s=deadline)
        except FlushTimeoutError as exc:
            self.telemetry.add("errors", ("shutdown_flush_timeout",))
            log.error("shutdown_flush_timeout", error=str(exc))
        self._commit_sealed(sync=True)
        try:
            self.consumer.close()  # revokes: partitions are released and committed
        except (KafkaException, RuntimeError) as exc:
            log.warning("consumer_close_failed", error=str(exc))
        remaining = max(1.0, deadline - (time.monotonic() - started))
        self.writer.close(timeout_s=remaining)
        self._dead_letters.close()
        self._status.write({**self.snapshot(), "stopped": True})
        log.info(
            "worker_stopped",
            worker=self.name,
            records=self.stats.records,
            poison=self.stats.poison,
            commits=self.stats.commits,
        )
