"""Where a produced batch's records that do not decode go, by their topic's `on_error`:
the batch refused whole (fail), the records to the dead-letter topic's partition of the same
number (dlq), or skipped and logged (skip)."""

from __future__ import annotations

import pyarrow as pa
import structlog
from kio.schema.errors import ErrorCode

from bridge.ingest.decode import Poison
from bridge.kafka_api.batches import ProducedBatch
from bridge.kafka_api.failures import creation_error
from bridge.kafka_api.owned import OwnedPartitions
from bridge.kafka_api.partition import Letters, Outcome, ProducedPartition
from bridge.kafka_api.stats import SinkStats

log = structlog.get_logger(__name__)


def place_poison(
    state: ProducedPartition,
    batch: ProducedBatch,
    records: pa.RecordBatch,
    poison: list[Poison],
    *,
    owned: OwnedPartitions,
    stats: SinkStats,
) -> Letters | Outcome | None:
    """Where a batch's poison records go; an Outcome when the batch is refused whole:
    its topic refuses such batches, or its dead-letter partition does not open (nothing
    was taken: its letters have nowhere to go)."""
    if not poison:
        return None
    refused = _refused(state, batch, poison, stats)
    if refused is not None:
        return refused
    mapping = state.mapping
    if mapping.on_error == "dlq" and mapping.dlq is not None:
        try:
            dlq = owned.dead_letters(mapping.dlq, state.partition)
        except Exception as exc:
            log.error(
                "topic_open_failed",
                topic=mapping.dlq,
                partition=state.partition,
                error=str(exc),
                error_type=type(exc).__name__,
            )
            code, message = creation_error(mapping.dlq, exc)
            return Outcome(error=code, message=message)
        stats.poison(state.topic, mapping.on_error, len(poison))
        return Letters(records, poison, dlq)
    stats.poison(state.topic, mapping.on_error, len(poison))
    for item in poison:
        log.warning(
            "record_skipped",
            topic=state.topic,
            partition=state.partition,
            offset=item.offset,
            error=item.error,
        )
    return None


def _refused(
    state: ProducedPartition, batch: ProducedBatch, poison: list[Poison], stats: SinkStats
) -> Outcome | None:
    """The answer to a batch with records that do not decode, when its topic refuses
    such batches (on_error: fail)."""
    mapping = state.mapping
    if not poison or mapping.on_error != "fail":
        return None
    stats.refused_records += batch.count
    return Outcome(
        error=ErrorCode.invalid_record,
        message=f"{len(poison)} of {batch.count} records do not decode as "
        f"{mapping.format} (first, record {poison[0].row}: {poison[0].error}); "
        "the batch is refused",
        record_errors=[(p.row, p.error) for p in poison[:16]],
    )
