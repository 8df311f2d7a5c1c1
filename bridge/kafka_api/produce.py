"""The Produce API: check and land each partition's record batch, then answer as the acks
setting promises.

A request is taken in two steps so one connection's batches land in the order it sent
them while their acknowledgements overlap: `accept` appends (and, when the writer is full,
holds the connection there, which is Kafka's quota behaviour: nothing more is read from
it), and what it returns says what to wait for (`ready`, durability) and builds the
response once that is done (`respond`).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import structlog
from kio.schema.errors import ErrorCode

from bridge.config.kafka_api import KafkaApiConfig
from bridge.kafka_api.batches import (
    CorruptBatchError,
    InvalidBatchError,
    OversizedBatchError,
    ProducedBatch,
    UnsupportedFormatError,
    read_batch,
    split_batches,
)
from bridge.kafka_api.failures import creation_error
from bridge.kafka_api.partition import Outcome, Ticket
from bridge.kafka_api.sink import ProduceSink, ThrottledError

log = structlog.get_logger(__name__)

Allowed = Callable[[str], bool]


class _Answer(NamedTuple):
    topic: str
    partition: int
    outcome: Outcome


class ProduceHandler:
    def __init__(self, sink: ProduceSink, api: KafkaApiConfig) -> None:
        self.sink = sink
        self.api = api

    async def accept(self, body: Any, allowed: Allowed) -> Accepted:
        """Land the request's batches; returns what the response waits for and what builds
        it, the milliseconds this connection was held back (its throttle time) and the
        errors of the partitions refused."""
        deadline = time.monotonic() + max(body.timeout.total_seconds(), 0.001)
        answers: list[_Answer] = []
        throttled = 0.0
        ticket = Ticket(asyncio.get_running_loop())
        if body.acks not in (-1, 0, 1):
            # Kafka answers every partition so, and takes nothing.
            wrong = Outcome(ErrorCode.invalid_required_acks, message=f"acks={body.acks}")
            answers = [
                _Answer(t.name, p.index, wrong) for t in body.topic_data for p in t.partition_data
            ]
            return Accepted(partial(_response, answers, 0), None, 0, [wrong.error])
        # What the writer did not take yet of the batches this request handed over, also
        # part way through it (before a topic opens, a schema is fetched).
        stalled: list[asyncio.Future[None]] = []
        try:
            for topic_data in body.topic_data:
                for data in topic_data.partition_data:
                    outcome, held = await self._partition(
                        body,
                        (topic_data.name, data.index),
                        data.records,
                        allowed,
                        ticket=ticket,
                        deadline=deadline,
                        stalled=stalled,
                    )
                    throttled += held
                    answers.append(_Answer(topic_data.name, data.index, outcome))
        finally:
            # The offsets of what was taken are handed out: it must land even if the
            # request goes no further.
            stalled += self.sink.land()
        waiting = {future for future in stalled if not future.done()}
        if waiting:
            # The writer took part of it: hold this connection until it took the rest.
            started = time.monotonic()
            await asyncio.wait(waiting)
            throttled += time.monotonic() - started
        self.sink.seal_due()
        throttle_ms = int(throttled * 1000)
        ready = None
        if body.acks == -1:
            # acks=all: until every partition is durable, at most until the timeout.
            ticket.arm(max(deadline - time.monotonic(), 0.001))
            ready = ticket.future

        def respond() -> dict[str, Any]:
            if ready is not None:
                self._settle(answers)
            return _response(answers, throttle_ms)

        refused: list[ErrorCode] = [
            a.outcome.error for a in answers if a.outcome.error is not ErrorCode.none
        ]
        return Accepted(respond, ready, throttle_ms, refused)

    async def _partition(
        self,
        body: Any,
        key: tuple[str, int],
        records: bytes | memoryview | None,
        allowed: Allowed,
        *,
        ticket: Ticket,
        deadline: float,
        stalled: list[asyncio.Future[None]],
    ) -> tuple[Outcome, float]:
        """One partition's answer; `stalled` gathers what the writer did not take yet of
        the batches handed over on the way."""
        topic, partition = key
        topics = self.sink.topics
        if (
            (self.api.auto_create_topics or topic in topics.unopened)
            and topic not in topics.partitions
            and body.transactional_id is None
            and allowed(topic)
        ):
            stalled += self.sink.land()  # nothing gathered waits for the partitions to open
            try:
                await self.sink.creation.create(topic, None, "produce")
            except Exception as exc:
                # This partition's answer: the request's others still get theirs.
                code, message = creation_error(topic, exc)
                outcome = Outcome(code, message=message)
                self._log_refused(topic, partition, outcome)
                return outcome, 0.0
        refused = self._refusal(body, topic, partition, records, allowed)
        if refused is not None:
            self._log_refused(topic, partition, refused)
            return refused, 0.0
        assert records is not None
        try:
            parts = split_batches(records)
            if len(parts) > 1:
                # Kafka's rule since produce v3: a partition's records are one batch, which
                # lands whole or not at all.
                raise InvalidBatchError(
                    f"{len(parts)} record batches for one partition; a produce request "
                    "carries exactly one per partition"
                )
            batches = [read_batch(data, self.api.max_uncompressed_batch_bytes) for data in parts]
        except OversizedBatchError as exc:
            # MESSAGE_TOO_LARGE, not CORRUPT_MESSAGE: the batch reads, it is too big. Java
            # producers split a batch of several records refused so and send the halves;
            # clients do not retry it as it is, where CORRUPT_MESSAGE is retried until the
            # delivery timeout.
            outcome = Outcome(ErrorCode.message_too_large, message=str(exc))
            self._log_refused(topic, partition, outcome)
            return outcome, 0.0
        except (UnsupportedFormatError, InvalidBatchError) as exc:
            outcome = Outcome(ErrorCode.invalid_record, message=str(exc))
            self._log_refused(topic, partition, outcome)
            return outcome, 0.0
        except CorruptBatchError as exc:
            outcome = Outcome(ErrorCode.corrupt_message, message=str(exc))
            self._log_refused(topic, partition, outcome)
            return outcome, 0.0
        transactional = [b for b in batches if b.transactional]
        if transactional:
            outcome = Outcome(
                ErrorCode.invalid_record, message="transactions are not supported by plateau"
            )
            return outcome, 0.0
        ahead = self._ahead(topic, partition, batches)
        if ahead is not None:
            self._log_refused(topic, partition, ahead)
            return ahead, 0.0
        return await self._land(
            topic, partition, batches, ticket, deadline, stalled=stalled, urgent=body.acks == -1
        )

    def _ahead(self, topic: str, partition: int, batches: list[ProducedBatch]) -> Outcome | None:
        """INVALID_TIMESTAMP for a CreateTime batch holding a record from too far ahead."""
        limit_s = self.api.timestamp_after_max
        state = self.sink.partitions.get((topic, partition))
        if limit_s is None or state is None or state.mapping.timestamp == "log_append_time":
            return None
        # One batch per partition since produce v3: no generator for the common case.
        newest = batches[0].newest if len(batches) == 1 else max(b.newest for b in batches)
        now_ms = int(time.time() * 1000)
        if newest <= now_ms + limit_s * 1000:
            return None
        return Outcome(
            ErrorCode.invalid_timestamp,
            message=f"a record's timestamp {newest} is {(newest - now_ms) / 1000:.0f}s ahead "
            f"of plateau's clock; kafka_api.timestamp_after_max allows {limit_s:.0f}s",
        )

    def _refusal(
        self,
        body: Any,
        topic: str,
        partition: int,
        records: bytes | memoryview | None,
        allowed: Allowed,
    ) -> Outcome | None:
        if body.transactional_id is not None:
            return Outcome(
                ErrorCode.transactional_id_authorization_failed,
                message="transactions are not supported by plateau",
            )
        if not allowed(topic):
            return Outcome(ErrorCode.topic_authorization_failed, message=f"not allowed: {topic}")
        count = self.sink.topics.partitions.get(topic)
        if count is None or not 0 <= partition < count:
            return Outcome(
                ErrorCode.unknown_topic_or_partition, message=f"no partition {topic}[{partition}]"
            )
        if not records:
            # Not CORRUPT_MESSAGE, which clients retry until their delivery timeout.
            return Outcome(ErrorCode.invalid_record, message="the partition carries no records")
        if len(records) > self.api.message_max_bytes:
            return Outcome(
                ErrorCode.message_too_large,
                message=f"{len(records)} bytes of records; message_max_bytes is "
                f"{self.api.message_max_bytes}",
            )
        return None

    async def _land(
        self,
        topic: str,
        partition: int,
        batches: list[ProducedBatch],
        ticket: Ticket,
        deadline: float,
        *,
        stalled: list[asyncio.Future[None]],
        urgent: bool,
    ) -> tuple[Outcome, float]:
        first: Outcome | None = None
        held = 0.0
        for batch in batches:
            if self.sink.fetches_schemas(topic, partition):
                stalled += await self.sink.prefetch_schemas(topic, partition, batch)
            while True:
                try:
                    outcome = self.sink.append(topic, partition, batch, ticket, urgent=urgent)
                    break
                except ThrottledError:
                    # What this request handed over so far goes to the writer first, and
                    # the answer waits for it: `ready` hands it over too, but no one would
                    # hold the request for what the writer did not take of it.
                    stalled += self.sink.land()
                    started = time.monotonic()
                    ready = await self.sink.ready((topic, partition), deadline - started)
                    waited = time.monotonic() - started
                    held += waited
                    stats = self.sink.stats
                    stats.throttled_requests += 1
                    stats.throttled_bytes += batch.size
                    stats.throttle_seconds += waited
                    if not ready:
                        outcome = Outcome(
                            ErrorCode.request_timed_out,
                            message="the store did not take the records within the timeout",
                        )
                        break
                except Exception as exc:
                    # `append` changes nothing before it can no longer fail: this partition
                    # is refused, and the request's others are answered as usual.
                    log.exception(
                        "produce_failed", topic=topic, partition=partition, error=str(exc)
                    )
                    outcome = Outcome(
                        ErrorCode.unknown_server_error,
                        message=f"the records could not be taken ({type(exc).__name__}); "
                        "plateau's log has the detail",
                    )
                    break
            if first is None:
                first = outcome
            else:
                first.durable += outcome.durable
            if outcome.error is not ErrorCode.none:
                first.error, first.message = outcome.error, outcome.message
                first.record_errors = outcome.record_errors
                self._log_refused(topic, partition, outcome)
                break
        assert first is not None
        return first, held

    def _settle(self, answers: list[_Answer]) -> None:
        """acks=all, once the request's ticket resolved: the partitions whose records are not
        durable (the timeout came first, or the partition went away) are answered so."""
        for answer in answers:
            outcome = answer.outcome
            if outcome.error is not ErrorCode.none:
                continue
            short = [state for state, end in outcome.durable if not state.is_durable(end)]
            if not short:
                continue
            failed = next((state.failure for state in short if state.failure is not None), None)
            if failed is not None:
                # The partition went away (shutdown) before the records were durable: as
                # unacknowledged as after a crash, and the producer sends them again.
                outcome.error = ErrorCode.not_leader_or_follower
                outcome.message = str(failed)
                continue
            outcome.error = ErrorCode.request_timed_out
            outcome.message = "the records were not durable within the request's timeout"
            self._log_refused(answer.topic, answer.partition, outcome)

    def _log_refused(self, topic: str, partition: int, outcome: Outcome) -> None:
        self.sink.stats.errors[("Produce", outcome.error.name)] += 1
        log.warning(
            "produce_refused",
            topic=topic,
            partition=partition,
            error=outcome.error.name,
            detail=outcome.message,
        )


class Accepted(NamedTuple):
    """A request taken: its response body (`respond`) once `ready` resolved (None: at once).
    A callback on `ready`, not a task per request that awaits it: a task and its coroutines
    cost the listener a few percent of its time per request (docs/benchmarks.md)."""

    respond: Callable[[], dict[str, Any]]
    ready: asyncio.Future[None] | None
    throttle_ms: int
    refused: list[ErrorCode]  # one per partition refused on arrival


def _response(answers: list[_Answer], throttle_ms: int) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for answer in answers:
        outcome = answer.outcome
        ok = outcome.error is ErrorCode.none
        topics.setdefault(answer.topic, []).append(
            {
                "index": answer.partition,
                "error_code": outcome.error,
                "base_offset": outcome.base_offset if ok else -1,
                "log_append_time": _datetime(outcome.log_append_time_ms) if ok else None,
                "log_start_offset": -1,
                "record_errors": [
                    {"batch_index": row, "batch_index_error_message": error}
                    for row, error in outcome.record_errors
                ],
                "error_message": outcome.message,
            }
        )
    return {
        "responses": [
            {"name": name, "partition_responses": partitions} for name, partitions in topics.items()
        ],
        "throttle_time": throttle_ms,
    }


def _datetime(ms: int) -> datetime.datetime | None:
    """LogAppendTime as the protocol carries it; None (-1 on the wire) for CreateTime."""
    return None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
