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
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import structlog
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from bridge.config.models import Config, TopicMapping
from bridge.decode import Decoder, Poison, decoder_for
from bridge.decode.common import offset_of
from bridge.dlq import DeadLetters
from bridge.errors import BridgeError
from bridge.kafka_client import ENFORCED_CONSUMER, client_config, librdkafka_logger
from bridge.telemetry import WorkerTelemetry
from bridge.worker_status import StatusFile, new_run_id
from plateau_core import (
    BackpressureError,
    FlushTimeoutError,
    SealedSegment,
    Store,
    Writer,
    WriterListener,
    WriterPolicy,
)
from plateau_core.errors import InvalidInputError
from plateau_core.names import validate_topic
from plateau_core.schema import merge_schemas

log = structlog.get_logger(__name__)
CLIENT_ERROR_LOG_INTERVAL_S = 30.0

Key = tuple[str, int]  # (source topic, partition)


class PoisonStopError(BridgeError):
    """A record failed to decode on a topic with `on_error: fail`."""


@dataclass
class Route:
    """How records of one source topic land."""

    mapping: TopicMapping
    plateau_topic: str
    decoder: Decoder


@dataclass
class PartitionState:
    plateau_topic: str
    next_offset: int  # the next offset to append; earlier ones are duplicates of a re-fetch
    paused_reason: str | None = None
    paused_since: float = 0.0
    watermark: int | None = None  # the manifest's next offset: what is durable
    committed: int | None = None  # the last offset Kafka confirmed as committed
    max_age_s: float = 0.0  # the roll policy's: unsealed records older than this are late


@dataclass
class WorkerStats:
    records: int = 0
    poison: int = 0
    pauses: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    resumes: int = 0
    commits: int = 0


Committable = tuple[str, int, int]  # (plateau topic, partition, offset to commit)


class _Listener(WriterListener):
    def __init__(
        self,
        sealed: queue.SimpleQueue[Committable],
        wake: threading.Event,
        telemetry: WorkerTelemetry,
    ) -> None:
        self.sealed = sealed
        self.wake = wake
        self.telemetry = telemetry

    def on_sealed(self, segment: SealedSegment) -> None:
        self.sealed.put((segment.topic, segment.partition, segment.end_offset))
        self.telemetry.sealed(
            segment.topic,
            segment.partition,
            segment.record_count,
            segment.size_bytes,
            segment.seconds,
        )

    def on_seal_failed(self, topic: str, partition: int, error: Exception) -> None:
        self.telemetry.add("errors", ("seal_failed",))

    def on_capacity(self) -> None:
        self.wake.set()

    def on_advanced(self, topic: str, partition: int, next_offset: int) -> None:
        self.sealed.put((topic, partition, next_offset))


class Worker:
    def __init__(
        self,
        config: Config,
        store: Store,
        stop: threading.Event,
        *,
        name: str = "worker-0",
        run: str | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.stop = stop
        self.name = name
        self.stats = WorkerStats()
        self.telemetry = WorkerTelemetry()
        self._status = StatusFile(config.storage.data_dir, name, run or new_run_id())
        previous = self._status.previous()
        if previous is not None:  # restarted by the supervisor: counters carry on
            self.telemetry.load(previous.get("telemetry", {}))
        self._kafka_down: str | None = None
        self._gaps_due = 0.0
        # Per error code: when it was last logged and how often it recurred since.
        self._client_errors: dict[str, tuple[float, int]] = {}
        self._sealed: queue.SimpleQueue[Committable] = queue.SimpleQueue()
        self._wake = threading.Event()
        storage = config.storage
        self.writer: Writer = store.writer(
            WriterPolicy(
                memory_budget_bytes=storage.memory_budget,
                writer_threads=storage.writer_threads,
                compression=storage.compression,
                min_free_disk_bytes=storage.min_free_disk or 0,
            ),
            _Listener(self._sealed, self._wake, self.telemetry),
        )
        self._routes: dict[str, Route] = {}
        self._partitions: dict[Key, PartitionState] = {}
        self._plateau_to_source: dict[str, str] = {}
        self._dead_letters = DeadLetters(self._producer_config())
        callbacks: dict[str, Any] = {
            "on_commit": self._on_commit,
            "error_cb": self._on_client_error,
            "stats_cb": self._on_stats,
        }
        self.consumer = Consumer(
            {**self._consumer_config(), **callbacks}, logger=librdkafka_logger()
        )

    # --- configuration --------------------------------------------------------------------

    def _consumer_config(self) -> dict[str, str | int]:
        kafka = self.config.kafka
        defaults: dict[str, str | int] = {
            "partition.assignment.strategy": "cooperative-sticky",
            # Regex mappings see topics created later within this interval.
            "topic.metadata.refresh.interval.ms": 10_000,
            "client.id": f"plateau-{self.name}",
            # librdkafka stops fetching while its queue holds queued.min.messages and then
            # waits fetch.queue.backoff.ms (1 s by default) before looking again; a Python
            # consumer drains that queue in a fraction of that, so with the default it idles
            # most of the time (about 150k records/s instead of over 500k on one core).
            "fetch.queue.backoff.ms": 10,
            # Broker connection states for /readyz (parsed in _on_stats).
            "statistics.interval.ms": 5000,
        }
        enforced: dict[str, str | int] = {
            "group.id": kafka.group_id,
            "auto.offset.reset": kafka.auto_offset_reset,
            "isolation.level": kafka.isolation_level,
            **ENFORCED_CONSUMER,
        }
        return client_config(self.config, defaults, enforced)

    def _producer_config(self) -> dict[str, str | int]:
        defaults: dict[str, str | int] = {
            "linger.ms": 5,
            # A poison record is as large as the source topic allowed; librdkafka's 1 MB
            # default would refuse a bigger one before the DLQ's broker is even asked.
            "message.max.bytes": 1_000_000_000,
        }
        return client_config(self.config, defaults, {"enable.idempotence": "true"})

    def subscriptions(self) -> list[str]:
        return [
            f"^({m.source.removeprefix('regex:')})$" if m.is_regex else m.source
            for m in self.config.topics
        ]

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """Consume until `stop` is set; then seal, commit and close within the deadline."""
        self.consumer.subscribe(
            self.subscriptions(),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        log.info("worker_started", worker=self.name, subscriptions=self.subscriptions())
        batch_size = self.config.kafka.poll_batch
        try:
            while not self.stop.is_set():
                self._resume_ready()
                paused = any(s.paused_reason for s in self._partitions.values())
                messages = self.consumer.consume(batch_size, timeout=0.05 if paused else 0.5)
                self._commit_sealed()
                if messages:
                    self._ingest(messages)
                if time.monotonic() >= self._gaps_due:
                    self._gaps_due = time.monotonic() + 1.0
                    self._advance_past_gaps()
                if self._status.due():
                    self._status.write(self.snapshot())
        finally:
            self._shutdown()

    def _ingest(self, messages: Sequence[Message]) -> None:
        for key, fetched in by_partition(self._without_errors(messages)):
            state = self._partitions.get(key)
            if state is None or state.paused_reason is not None:
                continue  # fetched before a revoke or a pause: it is fetched again later
            # A consumed message without an error always has an offset.
            offsets = cast(list[int], list(map(Message.offset, fetched)))
            fresh = fetched
            if min(offsets) < state.next_offset:  # a re-fetch overlapping what was appended
                fresh = list(itertools.compress(fetched, (o >= state.next_offset for o in offsets)))
            if fresh:
                self._land(key, state, fresh)

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
        active = {key: s for key, s in self._partitions.items() if s.paused_reason is None}
        if not active:
            return
        try:
            positions = self.consumer.position([TopicPartition(t, p) for t, p in active])
        except KafkaException:
            return  # asked again in a second
        for tp in positions:
            state = active.get((tp.topic, tp.partition))
            if state is None or tp.error is not None or tp.offset <= state.next_offset:
                continue
            self.writer.skip(state.plateau_topic, tp.partition, tp.offset)
            state.next_offset = tp.offset

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
        route = self._routes[key[0]]
        decoded = route.decoder.decode(messages)
        poison = decoded.poison
        batches = decoded.batches
        stop_at: int | None = None
        if poison and route.mapping.on_error == "fail":
            stop_at = offset_of(poison[0].message)
            batches = [_before(b, stop_at) for b in batches]
        refused_at: int | None = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            try:
                self.writer.append(state.plateau_topic, key[1], batch)
            except BackpressureError as exc:
                refused_at = batch.column("offset")[0].as_py()
                self._pause(key, state, refused_at, exc)
                break
            state.next_offset = batch.column("offset")[batch.num_rows - 1].as_py() + 1
            self.stats.records += batch.num_rows
            self.telemetry.ingested(state.plateau_topic, key[1], batch.num_rows, batch.nbytes)
        if stop_at is not None and refused_at is None:
            bad = poison[0]
            self.telemetry.add("poison_records", (state.plateau_topic, "fail"))
            raise PoisonStopError(
                f"{key[0]}[{key[1]}] offset {stop_at} cannot be decoded ({bad.error}); "
                "on_error is fail, so the worker stops before it"
            )
        limit = refused_at if refused_at is not None else None
        handled = [p for p in poison if limit is None or offset_of(p.message) < limit]
        if handled:
            self._handle_poison(route, key, state.plateau_topic, handled)
            if refused_at is None:
                last = max(offset_of(p.message) for p in handled)
                if last + 1 > state.next_offset:
                    state.next_offset = last + 1
                    self.writer.skip(state.plateau_topic, key[1], last + 1)

    def _handle_poison(
        self, route: Route, key: Key, plateau_topic: str, poison: list[Poison]
    ) -> None:
        self.stats.poison += len(poison)
        if route.mapping.on_error == "dlq" and route.mapping.dlq:
            self._dead_letters.send(route.mapping.dlq, poison)
            self.telemetry.add("poison_records", (plateau_topic, "dlq"), len(poison))
            return
        self.telemetry.add("poison_records", (plateau_topic, "skip"), len(poison))
        for item in poison:
            log.warning(
                "record_skipped",
                topic=key[0],
                partition=key[1],
                offset=offset_of(item.message),
                error=item.error,
            )

    # --- pause and resume ---------------------------------------------------------------------

    def _pause(self, key: Key, state: PartitionState, offset: int, exc: BackpressureError) -> None:
        tp = TopicPartition(key[0], key[1], offset)
        self.consumer.pause([tp])
        self.consumer.seek(tp)
        state.paused_reason = exc.reason
        state.paused_since = time.monotonic()
        state.next_offset = offset
        self.stats.pauses[exc.reason] += 1
        self.telemetry.add("pauses", (exc.reason,))
        log.info(
            "partition_paused",
            topic=key[0],
            partition=key[1],
            offset=offset,
            reason=exc.reason,
            detail=exc.detail,
        )

    def _resume_ready(self) -> None:
        if not self._wake.is_set() and not any(s.paused_reason for s in self._partitions.values()):
            return
        self._wake.clear()
        for key, state in self._partitions.items():
            if state.paused_reason is None:
                continue
            if not self.writer.accepting(state.plateau_topic, key[1]):
                continue
            self.consumer.resume([TopicPartition(key[0], key[1])])
            self._end_pause(state)
            log.info(
                "partition_resumed",
                topic=key[0],
                partition=key[1],
                offset=state.next_offset,
                reason=state.paused_reason,
                paused_s=round(time.monotonic() - state.paused_since, 3),
            )
            state.paused_reason = None
            self.stats.resumes += 1

    def _end_pause(self, state: PartitionState) -> None:
        if state.paused_reason is not None:
            seconds = time.monotonic() - state.paused_since
            self.telemetry.add("paused_seconds", (state.paused_reason,), seconds)

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
            source = self._plateau_to_source.get(topic)
            if source is None:
                continue
            key = (source, partition)
            state = self._partitions.get(key)
            if state is not None and (state.watermark is None or offset > state.watermark):
                state.watermark = offset
            if only is not None and key not in only:
                keep.append(item)
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
            log.warning("offset_commit_failed", error=str(exc), offsets=_describe(offsets))
            return
        for tp in offsets:
            log.debug("offsets_committed", topic=tp.topic, partition=tp.partition, offset=tp.offset)

    # --- rebalance callbacks --------------------------------------------------------------

    def _route(self, source: str) -> Route:
        route = self._routes.get(source)
        if route is None:
            mapping = self.config.mapping_for(source)
            if mapping is None:
                raise BridgeError(f"no topic mapping matches the assigned topic {source!r}")
            plateau_topic = mapping.plateau_topic(source)
            try:
                validate_topic(plateau_topic)
            except InvalidInputError as exc:
                index = self.config.topics.index(mapping)
                raise BridgeError(
                    f"topics.{index}.name {mapping.name!r} lands Kafka topic {source!r} in "
                    f"{plateau_topic!r}, which is not a usable plateau topic: {exc}"
                ) from None
            route = Route(mapping, plateau_topic, decoder_for(mapping))
            self._seed(route)
            self._routes[source] = route
            self._plateau_to_source[route.plateau_topic] = source
        return route

    def _seed(self, route: Route) -> None:
        stored = self.store.manifest.schemas(route.plateau_topic)
        if not stored:
            return
        try:
            route.decoder.seed(merge_schemas(stored.values()))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            log.warning("stored_schemas_disagree", topic=route.plateau_topic, error=str(exc))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            route = self._route(tp.topic)
            watermark = self.writer.acquire(
                route.plateau_topic,
                tp.partition,
                roll=self.config.roll_policy(route.mapping),
                timeout_s=self.config.shutdown_timeout + 10,
            )
            tp.offset = self._start_offset(consumer, tp, route, watermark)
            self._partitions[(tp.topic, tp.partition)] = PartitionState(
                route.plateau_topic,
                watermark or 0,
                watermark=watermark,
                max_age_s=self.config.roll_policy(route.mapping).max_age_s,
            )
            log.info(
                "partition_assigned",
                topic=tp.topic,
                partition=tp.partition,
                plateau_topic=route.plateau_topic,
                next_offset=watermark,
                worker=self.name,
            )
        consumer.incremental_assign(partitions)

    def _start_offset(
        self, consumer: Consumer, tp: TopicPartition, route: Route, watermark: int | None
    ) -> int:
        """The manifest is the source of truth; Kafka's committed offset is for lag tools."""
        if watermark is None:
            if self.config.kafka.start_without_watermark == "committed":
                return OFFSET_STORED  # librdkafka falls back to auto.offset.reset
            earliest = self.config.kafka.auto_offset_reset == "earliest"
            return OFFSET_BEGINNING if earliest else OFFSET_END
        low, _high = consumer.get_watermark_offsets(
            TopicPartition(tp.topic, tp.partition), timeout=10
        )
        if low > watermark:
            self.store.manifest.record_gap(route.plateau_topic, tp.partition, watermark, low)
            log.warning(
                "offset_gap",
                topic=tp.topic,
                partition=tp.partition,
                next_offset=watermark,
                earliest_available=low,
                missing=low - watermark,
                reason="Kafka's retention removed these records before plateau read them",
            )
            return int(low)
        return watermark

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        for topic, partition in sorted(keys):
            state = self._partitions.pop((topic, partition), None)
            if state is None:
                continue
            self._end_pause(state)
            try:
                self.writer.release(
                    state.plateau_topic, partition, timeout_s=self.config.shutdown_timeout
                )
            except FlushTimeoutError as exc:
                self.telemetry.add("errors", ("revoke_flush_timeout",))
                log.error("revoke_flush_timeout", topic=topic, partition=partition, error=str(exc))
                self.writer.release(state.plateau_topic, partition, seal=False)
            log.info("partition_revoked", topic=topic, partition=partition, worker=self.name)
        self._commit_sealed(only=keys, sync=True)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            state = self._partitions.pop((tp.topic, tp.partition), None)
            if state is not None:
                self._end_pause(state)
                self.writer.release(state.plateau_topic, tp.partition, seal=False)
            log.warning("partition_lost", topic=tp.topic, partition=tp.partition)
        # Nothing is committed for lost partitions: another member owns them now; their
        # sealed segments stay in the queue and are dropped with the unknown source below.

    # --- what the serve process sees (status file, metrics, readiness) ------------------------

    def snapshot(self) -> dict[str, Any]:
        """This worker's partitions, offsets, pauses and counters, as JSON-able data."""
        now = time.monotonic()
        unsealed = self.writer.unsealed_since()
        stats = self.writer.stats()
        partitions = []
        # Seconds of pauses still running, on top of the paused_seconds counter.
        pausing: dict[str, float] = defaultdict(float)
        for (source, partition), state in sorted(self._partitions.items()):
            low, high = self.consumer.get_watermark_offsets(
                TopicPartition(source, partition), cached=True
            )
            since = unsealed.get((state.plateau_topic, partition))
            age = None if since is None else round(now - since, 3)
            partitions.append(
                {
                    "source": source,
                    "topic": state.plateau_topic,
                    "partition": partition,
                    "next_offset": state.next_offset,
                    "watermark": state.watermark,
                    "committed": state.committed,
                    "low_offset": low if low >= 0 else None,
                    "end_offset": high if high >= 0 else None,
                    "paused": state.paused_reason,
                    "unsealed_age_s": age,
                    "max_age_s": state.max_age_s,
                }
            )
            if state.paused_reason is not None:
                pausing[state.paused_reason] += now - state.paused_since
        return {
            "worker": self.name,
            "stopped": False,
            "kafka_down": self._kafka_down,
            "memory": {
                "used": stats.buffered_bytes + stats.in_flight_bytes,
                "budget": self.writer.policy.memory_budget_bytes,
            },
            "partitions": partitions,
            "telemetry": self.telemetry.dump(),
            "pausing_s": dict(pausing),
        }

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Kafka's answer to a commit (served from consume(), on this thread)."""
        if error is not None:
            self.telemetry.add("errors", ("offset_commit_failed",))
            return
        for tp in partitions:
            state = self._partitions.get((tp.topic, tp.partition))
            if tp.error is None and tp.offset >= 0 and state is not None:
                state.committed = max(state.committed or 0, tp.offset)

    def _on_client_error(self, error: KafkaError) -> None:
        """librdkafka's client-level errors: lost connections, unreachable brokers."""
        self.telemetry.add("errors", ("kafka_" + error.name().strip("_").lower(),))
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self._kafka_down = f"all brokers down ({self.config.kafka.bootstrap_servers})"
        # librdkafka reports every failed attempt of every connection (with its own
        # backoff); during an outage that is tens of lines a second. Log each kind once,
        # then once per CLIENT_ERROR_LOG_INTERVAL_S with how often it recurred meanwhile.
        now = time.monotonic()
        last, repeated = self._client_errors.get(error.name(), (-CLIENT_ERROR_LOG_INTERVAL_S, 0))
        if now - last < CLIENT_ERROR_LOG_INTERVAL_S:
            self._client_errors[error.name()] = (last, repeated + 1)
            return
        self._client_errors[error.name()] = (now, 0)
        log.warning(
            "kafka_client_error",
            worker=self.name,
            error=str(error),
            code=error.name(),
            repeated=repeated,
        )

    def _on_stats(self, document: str) -> None:
        """librdkafka's statistics: whether any real broker connection is up."""
        try:
            brokers = json.loads(document).get("brokers", {})
        except ValueError:
            return
        states = [b.get("state") for b in brokers.values() if b.get("source") != "logical"]
        if any(state == "UP" for state in states):
            if self._kafka_down is not None:
                log.info("kafka_reachable", worker=self.name)
                self._client_errors.clear()  # a new outage is logged from its first error
            self._kafka_down = None
        elif states:
            self._kafka_down = f"no broker connection up ({self.config.kafka.bootstrap_servers})"

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


def by_partition(messages: Sequence[Message]) -> list[tuple[Key, list[Message]]]:
    """The messages grouped by (topic, partition), each group in the order consumed.

    consume() returns runs of one partition; the run boundaries are found with C-level
    comparisons of neighbours rather than a Python loop over every message.
    """
    if not messages:
        return []
    topics = list(map(Message.topic, messages))
    partitions = list(map(Message.partition, messages))
    if topics.count(topics[0]) == len(topics):  # one topic: compare partitions (no tuples)
        changes = map(operator.ne, partitions, partitions[1:])
    else:
        keys = list(zip(topics, partitions, strict=True))
        changes = map(operator.ne, keys, keys[1:])
    starts = [0, *itertools.compress(range(1, len(messages)), changes)]
    groups: dict[Key, list[Message]] = {}
    for start, end in zip(starts, [*starts[1:], len(messages)], strict=True):
        topic, partition = topics[start], partitions[start]
        if topic is None or partition is None:
            continue
        groups.setdefault((topic, partition), []).extend(messages[start:end])
    return list(groups.items())


def _before(batch: pa.RecordBatch, offset: int) -> pa.RecordBatch:
    offsets = batch.column("offset")
    keep = sum(1 for o in offsets.to_pylist() if o < offset)
    return batch.slice(0, keep)


def _describe(offsets: list[TopicPartition]) -> list[str]:
    return [f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in offsets]
