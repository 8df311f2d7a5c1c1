"""Landing a partition's fetched records in the writer: decoded, appended, and poison
records handled per the mapping's on_error (dead-lettered, skipped, or the worker stops).
An append the writer refuses, or a schema registry that does not answer, pauses the
partition at the first record not taken."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import structlog
from confluent_kafka import Message

from bridge.consume.batches import Key, before, from_offset
from bridge.consume.dlq import DeadLetters
from bridge.consume.messages import records_of
from bridge.consume.pauses import REGISTRY, Pauses
from bridge.consume.routes import Route, Routes
from bridge.consume.state import PartitionState, WorkerStats
from bridge.errors import BridgeError
from bridge.ingest.decode import Poison, RegistryUnavailableError
from bridge.ops.telemetry import WorkerTelemetry
from plateau_core import BackpressureError, Writer

log = structlog.get_logger(__name__)


class PoisonStopError(BridgeError):
    """A record failed to decode on a topic with `on_error: fail`."""


class Landing:
    """A worker's landing of the records it fetched, on the worker's thread."""

    def __init__(
        self,
        routes: Routes,
        writer: Writer,
        *,
        pauses: Pauses,
        dead_letters: DeadLetters,
        stats: WorkerStats,
        telemetry: WorkerTelemetry,
    ) -> None:
        self.routes = routes
        self.writer = writer
        self.pauses = pauses
        self.dead_letters = dead_letters
        self.stats = stats
        self.telemetry = telemetry

    def land(self, key: Key, state: PartitionState, messages: list[Message]) -> None:
        """Decode and append records the partition does not hold yet, from next_offset on."""
        route = self.routes.known(key[0])
        records = records_of(messages)
        try:
            # What a decoder logs of the records (a json integer rounded) names them.
            with structlog.contextvars.bound_contextvars(
                topic=state.plateau_topic, partition=key[1]
            ):
                decoded = route.decoder.decode(records)
        except RegistryUnavailableError as exc:
            # The records wait in Kafka: skipping them would lose data the registry could
            # decode a moment later. Resumed once it answers (asked every retry_interval).
            self.pauses.pause(key, state, records.column("offset")[0].as_py(), REGISTRY, str(exc))
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
                self.pauses.pause(key, state, refused_at, exc.reason, exc.detail)
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
            self.dead_letters.send(route.mapping.dlq, key, records, poison)
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
