"""Where produced record batches land: a Writer of the store owning every partition of the
produced topics (bridge.kafka_api.owned), with offsets handed out here, idempotent producers
checked against what the manifest and the buffers hold, and acks=all answered once the
records are durable: synced to the journal, or sealed with `durability: segment`.

All methods run on the listener's event loop thread; the Writer's listener hooks hop onto
it with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

import structlog
from kio.schema.errors import ErrorCode

from bridge.config.kafka_api import KafkaApiConfig
from bridge.config.models import Config
from bridge.ingest.decode import RegistryUnavailableError
from bridge.ingest.decode.raw import RawDecoder
from bridge.ingest.decode.schema_format import SchemaDecoder
from bridge.kafka_api.batches import Placed, ProducedBatch, envelope_of
from bridge.kafka_api.creation import TopicCreation
from bridge.kafka_api.daemon_calls import off_loop
from bridge.kafka_api.failures import append_error
from bridge.kafka_api.landing import Landing
from bridge.kafka_api.lazy_records import KafkaRecords
from bridge.kafka_api.owned import OwnedPartitions
from bridge.kafka_api.partition import Outcome, Pending, ProducedPartition, Ticket
from bridge.kafka_api.poison import place_poison
from bridge.kafka_api.stats import SinkStats
from bridge.kafka_api.topics import ProducedTopics
from bridge.store import consolidator_for
from plateau_core import Append, Store
from plateau_core.errors import JournalFailedError
from plateau_core.lazy import Item
from plateau_core.listener import SealedSegment
from plateau_core.policies import JOURNAL_MIN_BYTES, WriterPolicy
from plateau_core.producers import ProducerBatch, Verdict

log = structlog.get_logger(__name__)


class ThrottledError(Exception):
    """The writer cannot take this partition's records now; retry once `ready()` resolves."""

    def __init__(self, topic: str, partition: int, reason: str) -> None:
        super().__init__(f"{topic}[{partition}]: {reason}")
        self.key = (topic, partition)
        self.reason = reason


class ProduceSink:
    def __init__(
        self,
        config: Config,
        api: KafkaApiConfig,
        store: Store,
        loop: asyncio.AbstractEventLoop,
        stats: SinkStats,
    ) -> None:
        self.config = config
        self.store = store
        self.loop = loop
        self.stats = stats
        self.api = api
        self.topics = ProducedTopics(config, api, store.manifest)
        self.journaled = api.durability == "journal"
        storage = config.storage
        self.writer = store.writer(
            WriterPolicy(
                memory_budget_bytes=storage.memory_budget,
                # Seals here are small and frequent (each acks=all group commit is one per
                # partition); more threads than two only contend for the interpreter lock
                # (measured: docs/benchmarks.md, the Kafka API).
                writer_threads=min(storage.writer_threads, 2),
                compression=storage.compression,
                compression_adaptive=storage.compression_adaptive,
                min_free_disk_bytes=storage.min_free_disk or 0,
                tick_s=0.02,
                # One manifest transaction per cycle for every partition that is due: the
                # seal commit's CPU, not the disk, bounds how many acks=all batches land.
                seal_together=True,
                # The producers answered by a group send their next batches within a few
                # ms; held that long, the next group takes them (docs/benchmarks.md).
                group_hold_s=0.0 if self.journaled else api.group_commit_hold,
                # The memory budget bounds what is unsealed.
                journal_max_bytes=api.journal_max_bytes
                or max(storage.memory_budget, JOURNAL_MIN_BYTES),
            ),
            self,
            journal=self.journaled,
        )
        self.owned = OwnedPartitions(config, store, self.topics, self.writer, api.durability)
        self.partitions = self.owned.states
        # Partitions with batches `append` took and `land` has not handed to the writer.
        self._gathered: dict[tuple[str, int], ProducedPartition] = {}
        self.landing = Landing(self.writer, self.partitions, self._gathered, stats, loop)
        # The sink's own name for it, as callers know it (no extra call per request).
        self.land = self.landing.land
        self._capacity = asyncio.Event()
        self._closed = False
        # The journal failed (its thread stopped): every produce is refused with this.
        self.journal_failure: Outcome | None = None
        self.creation = TopicCreation(self.topics, self.owned, loop)
        self.consolidator = consolidator_for(config, store, self.writer, produced=True)
        self.consolidator.start(storage.consolidate_interval)

    # --- partitions ---------------------------------------------------------------------------

    def open(self) -> None:
        """Acquire every produced partition, replaying the journal first."""
        self.expire_stored_producers()
        self.owned.open()

    def expire_producers(self) -> int:
        """Forget the idempotent producers silent for `producer_expiry` in the partitions'
        memory; returns how many (producer, partition) states went."""
        expiry = self.api.producer_expiry
        before = time.monotonic() - expiry
        forgotten = 0
        for state in self.partitions.values():
            gone = state.forget_producers(before)
            if gone:
                forgotten += gone
                log.info(
                    "producers_forgotten",
                    topic=state.topic,
                    partition=state.partition,
                    producers=gone,
                    next_offset=state.next_offset,
                    silent_s=expiry,
                )
        return forgotten

    def expire_stored_producers(self) -> int:
        """The same in the manifest (a write transaction: off the event loop)."""
        expiry = self.api.producer_expiry
        rows = self.store.manifest.expire_producers(int((time.time() - expiry) * 1000))
        if rows:
            log.info("producer_states_expired", rows=rows, silent_s=expiry)
        return rows

    def close(self, timeout_s: float) -> None:
        """Seal what is buffered and let every partition go."""
        self.consolidator.stop()
        # Batches still stalled were never taken, so never acknowledged: their producers
        # send them again. Retrying them after the writer closed only fails.
        self._closed = True
        try:
            self.writer.close(timeout_s=timeout_s)
        except JournalFailedError as exc:
            # Logged when it failed; the partitions it names are pinned for the replay.
            log.warning("kafka_api_unsealed_kept", reason=str(exc))
        finally:
            for state in self.partitions.values():
                state.fail_waiters(ConnectionAbortedError("the listener is stopping"))

    # --- appends ------------------------------------------------------------------------------

    def fetches_schemas(self, topic: str, partition: int) -> bool:
        """Whether the partition's records name schemas of a registry (`prefetch_schemas`);
        asked first, so that the other topics' batches do not each make a coroutine."""
        state = self.partitions.get((topic, partition))
        return state is not None and isinstance(state.decoder, SchemaDecoder)

    async def prefetch_schemas(
        self, topic: str, partition: int, batch: ProducedBatch
    ) -> list[asyncio.Future[None]]:
        """Fetch the writer schemas a batch names that are not in memory yet, on a thread:
        a registry that is slow or down must not stall the event loop, and with it every
        other connection, for its timeout. `append` then finds them in memory (or the
        registry marked down, which it reports at once). Returns what `land` returned
        for the batches handed over first: the request waits for them as for its others."""
        state = self.partitions.get((topic, partition))
        decoder = None if state is None else state.decoder
        if not isinstance(decoder, SchemaDecoder):
            return []
        records = batch.records()
        missing = decoder.unfetched(records.values, records.keys)
        if not missing:
            return []
        stalled = self.land()  # nothing gathered waits for a registry
        await off_loop(_prefetch, decoder, missing)
        return stalled

    def append(
        self,
        topic: str,
        partition: int,
        batch: ProducedBatch,
        ticket: Ticket,
        *,
        urgent: bool = False,
    ) -> Outcome:
        """Take one batch, to be handed to the writer by `land`; raises ThrottledError
        (nothing done) when the writer cannot take it now. `ticket` is counted off once the
        batch is durable. `urgent`: the producer waits for durability (acks=all), so with
        durability: segment seal at once (the journal makes it durable without a seal)."""
        urgent = urgent and not self.journaled
        refused = self.journal_failure
        if refused is not None:
            # Also a batch sent again: answered with its first offsets, it would wait for a
            # durability that does not come.
            return Outcome(error=refused.error, message=refused.message)
        state = self.partitions[(topic, partition)]
        if state.stalled and state.key not in self._gathered:
            raise ThrottledError(topic, partition, "earlier records are still waiting")
        if not self.writer.accepting(topic, partition):
            raise ThrottledError(topic, partition, "the writer is at its memory budget")
        idempotent = batch.idempotent
        last_sequence = batch.last_sequence
        if idempotent:
            verdict = state.check_producer(
                batch.producer_id, batch.producer_epoch, batch.base_sequence, last_sequence
            )
            if verdict.verdict is Verdict.DUPLICATE:
                return self._duplicate(state, batch, verdict.base_offset or 0, ticket)
            if verdict.verdict is not Verdict.NEW:
                code = (
                    ErrorCode.invalid_producer_epoch
                    if verdict.verdict is Verdict.FENCED
                    else ErrorCode.out_of_order_sequence_number
                )
                return Outcome(error=code, message=verdict.detail)
        appended_ms = int(time.time() * 1000)
        log_append = state.mapping.timestamp == "log_append_time"
        base = state.next_offset
        placed = Placed(batch, base, appended_ms if log_append else -1, appended_ms)
        decoder = state.decoder
        letters = None
        if isinstance(decoder, RawDecoder):
            # Nothing in a raw topic's records can fail to decode: their rows are built when
            # sealed, many batches at once (bridge.kafka_api.lazy_records).
            rows: Sequence[Item] = [KafkaRecords(placed, decoder.kept)]
        else:
            records = envelope_of([placed])
            try:
                # What a decoder logs of the records (a json integer rounded) names them.
                with structlog.contextvars.bound_contextvars(topic=topic, partition=partition):
                    decoded = decoder.decode(records)
            except RegistryUnavailableError as exc:
                # Retriable, and nothing was taken: the producer sends the batch again, as a
                # consumed partition waits, instead of its records being skipped.
                return Outcome(
                    error=ErrorCode.kafka_storage_error,
                    message=f"the records cannot be decoded now ({exc}); retry",
                )
            rows = decoded.batches
            poisoned = place_poison(
                state, batch, records, decoded.poison, owned=self.owned, stats=self.stats
            )
            if isinstance(poisoned, Outcome):
                return poisoned
            letters = poisoned
        state.reserve(batch.count)
        end = base + batch.count
        producer = before = None
        if idempotent:
            producer = ProducerBatch(
                batch.producer_id, batch.producer_epoch, batch.base_sequence, last_sequence, base
            )
            before = state.producers.get(batch.producer_id)
            state.remember(producer)
            if log_append:
                state.appended(base, appended_ms)
        # advance_to: offsets of the batch that land nowhere here (poison) are passed over
        # in the same transaction as its rows, its producer batch and its dead letters.
        source = Append(topic, partition, rows, producer, end, urgent)
        outcome = Outcome(
            base_offset=base,
            log_append_time_ms=appended_ms if log_append else -1,
            durable=[(state, end)],
        )
        pending = Pending(source, base, outcome, before, letters, batch.count, batch.size)
        state.durable(end, ticket, outcome)
        state.stalled.append(pending)
        self._gathered[state.key] = state
        return outcome

    def _duplicate(
        self, state: ProducedPartition, batch: ProducedBatch, base: int, ticket: Ticket
    ) -> Outcome:
        """The answer to a batch sent again: the offsets it got the first time, once durable."""
        self.stats.duplicates += 1
        log.info(
            "produce_duplicate",
            topic=state.topic,
            partition=state.partition,
            producer_id=batch.producer_id,
            sequence=batch.base_sequence,
            base_offset=base,
        )
        end = base + batch.count
        outcome = Outcome(
            base_offset=base,
            log_append_time_ms=state.append_times.get(base, -1),
            durable=[(state, end)],
        )
        state.durable(end, ticket, outcome)
        return outcome

    def seal_due(self) -> None:
        """A request's batches are all appended: seal the due partitions as one group."""
        self.writer.seal_due()

    async def ready(self, key: tuple[str, int], timeout_s: float) -> bool:
        """Wait until the partition can take records again (at most `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.landing.retry_stalled()
            state = self.partitions[key]
            if not state.stalled and self.writer.accepting(*key):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._capacity.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._capacity.wait(), min(remaining, 0.05))

    # --- the writer's hooks (on its threads) ------------------------------------------------

    def on_sealed(self, segment: SealedSegment) -> None:
        self._call(self._sealed, segment.topic, segment.partition, segment.end_offset)

    def on_advanced(self, topic: str, partition: int, next_offset: int) -> None:
        self._call(self._sealed, topic, partition, next_offset)

    def on_capacity(self) -> None:
        self._call(self._capacity_freed)

    def on_journaled(self, seq: int) -> None:
        self._call(self.landing.journaled, seq)

    def on_journal_failed(self, error: JournalFailedError) -> None:
        self._call(self._journal_failed, error)

    def _journal_failed(self, error: JournalFailedError) -> None:
        code, message = append_error(error)
        self.journal_failure = Outcome(error=code, message=message)
        self.landing.journal_failed(error)
        # Stalled batches would wait for room the writer will not make: refused now.
        self.landing.retry_stalled()

    def _capacity_freed(self) -> None:
        self._capacity.set()
        if not self._closed:
            self.landing.retry_stalled()

    def _call(self, callback: Callable[..., None], *args: object) -> None:
        # RuntimeError: the loop has closed (the final seals of a shutdown).
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(callback, *args)

    def on_seal_failed(self, topic: str, partition: int, error: Exception) -> None:
        self.stats.seal_failures += 1

    def _sealed(self, topic: str, partition: int, end: int) -> None:
        state = self.partitions.get((topic, partition))
        if state is not None:
            state.sealed(end)
            self.landing.durable(state)


def _prefetch(decoder: SchemaDecoder, missing: list[tuple[int, str | None]]) -> None:
    for schema_id, rendering in missing:
        decoder.source.prefetch(schema_id, rendering)
