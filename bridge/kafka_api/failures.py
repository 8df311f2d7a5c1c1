"""The protocol's answers for what failed in the store: a topic whose partitions did not
open, a batch the writer refused for anything but memory. Clients are not told file names
or SQL; the log has them."""

from __future__ import annotations

import asyncio

import structlog
from kio.schema.errors import ErrorCode
from sqlalchemy.exc import SQLAlchemyError

from bridge.kafka_api.partition import ProducedPartition
from bridge.kafka_api.stats import SinkStats
from bridge.kafka_api.topics import TopicNameError
from plateau_core.errors import InvalidInputError, PlateauError

log = structlog.get_logger(__name__)


def creation_error(topic: str, exc: BaseException) -> tuple[ErrorCode, str]:
    """The protocol's answer for a topic whose creation failed: a name refused, the store
    unable to open its partitions (KAFKA_STORAGE_ERROR, which clients retry: the disk or the
    manifest may come back), or anything else. The client is not told file names or SQL;
    the log's topic_open_failed has them."""
    if isinstance(exc, (TopicNameError, InvalidInputError)):
        return ErrorCode.invalid_topic_exception, str(exc)
    return _failed(f"the partitions of topic {topic!r} could not be opened", exc)


def unfinished(
    topic: str, opening: asyncio.Future[int], still: str
) -> tuple[ErrorCode, str] | None:
    """The answer of a topic whose partitions a request opens (CreateTopics,
    CreatePartitions): REQUEST_TIMED_OUT while they are still opening when its timeout
    came (`still` says so; librdkafka reads it as success), the failure's when they did not
    open, None once they did."""
    if not opening.done():
        return ErrorCode.request_timed_out, still
    failed = opening.exception()
    return None if failed is None else creation_error(topic, failed)


def append_error(exc: BaseException) -> tuple[ErrorCode, str]:
    """The protocol's answer for a batch the writer refused for anything but memory: records
    the store cannot take as they are (UNKNOWN_SERVER_ERROR, which clients do not retry),
    the store failing (KAFKA_STORAGE_ERROR, which they retry), or anything else. File names
    are not told; the log's produce_append_failed has them."""
    if isinstance(exc, InvalidInputError):
        return ErrorCode.unknown_server_error, f"the store refused the records: {exc}"
    return _failed("the records could not be stored", exc)


def _failed(what: str, exc: BaseException) -> tuple[ErrorCode, str]:
    """KAFKA_STORAGE_ERROR (clients retry) when the store failed, UNKNOWN_SERVER_ERROR for
    anything else; the message names the error's type only."""
    why = f"{what} ({type(exc).__name__}); plateau's log has the detail"
    if isinstance(exc, (OSError, PlateauError, SQLAlchemyError)):
        return ErrorCode.kafka_storage_error, why
    return ErrorCode.unknown_server_error, why


def refuse_stalled(state: ProducedPartition, exc: Exception, stats: SinkStats) -> None:
    """The writer refused the partition's oldest stalled batch, for something other than
    memory, before taking any of it: that batch and those behind it (their offsets follow
    its) are answered with an error and their offsets taken back. Left stalled, they
    were retried before every later batch of the partition and failed it the same way,
    and landed unacknowledged once the cause went: a producer's retry stored twice."""
    dropped, state.stalled = state.stalled, []
    code, message = append_error(exc)
    first = dropped[0]
    log.error(
        "produce_append_failed",
        topic=state.topic,
        partition=state.partition,
        offset=first.base,
        batches=len(dropped),
        answered=code.name,
        error=str(exc),
        error_type=type(exc).__name__,
    )
    stats.errors[("Produce", code.name)] += 1
    stats.failed(state.topic, sum(pending.records for pending in dropped))
    behind = f"an earlier batch of {state.topic}[{state.partition}] was refused; retry"
    for pending in dropped[1:]:
        # Refused for their place only (retriable): the producer sends them again.
        stats.errors[("Produce", ErrorCode.kafka_storage_error.name)] += 1
        pending.outcome.error = ErrorCode.kafka_storage_error
        pending.outcome.message = behind
    state.take_back(dropped, code, message)
