"""ListOffsets: where each partition's records begin and end, and the first offset at or
after a time, as a broker answers them (kafka-get-offsets.sh, an AdminClient's
list_offsets, a consumer's offsetsForTimes, monitoring tools counting a topic's records).

A partition's end (LATEST) is its high watermark: every offset below it is durable (in the
journal or sealed), as Kafka's high watermark is every offset its replicas hold. Its start
(EARLIEST) is the first offset retention kept. A time or MAX_TIMESTAMP lookup searches the
stored `timestamp` column (which a topic may take from a value field). When the answer is
not in the sealed segments (a time later than every sealed record's, or the largest
timestamp), the partition's durable records not sealed yet are sealed first, so the
answer is exact; that costs a small segment, which consolidation merges later.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import structlog
from kio.schema.errors import ErrorCode

from bridge.kafka_api.daemon_calls import off_loop
from bridge.kafka_api.sink import ProduceSink
from plateau_core import FlushTimeoutError, PlateauError, Store
from plateau_core.schema import OFFSET, TIMESTAMP

log = structlog.get_logger(__name__)

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest).
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
UNKNOWN = -1  # no offset or timestamp (Kafka's UNKNOWN_OFFSET, NO_TIMESTAMP)
LEADER_EPOCH = 0  # what Metadata answers: plateau's one node has led every partition
# How long a lookup waits for its partition's unsealed records to seal.
SEAL_WAIT_S = 10.0


@dataclass(frozen=True)
class Lookup:
    """One partition's search of the store: its first retained offset, the first record at
    or after `timestamp`, or the record with the largest timestamp."""

    topic: str
    partition: int
    timestamp: int
    seal: bool  # records below `durable` are not all sealed: seal them first
    durable: int  # the high watermark when asked: the answer lies below it


@dataclass(frozen=True)
class Found:
    offset: int = UNKNOWN
    timestamp: int = UNKNOWN
    error: ErrorCode = ErrorCode.none


class OffsetsHandler:
    def __init__(self, sink: ProduceSink) -> None:
        self.sink = sink
        self.topics = sink.topics

    async def list_offsets(self, body: Any, allowed: Callable[[str], bool]) -> dict[str, Any]:
        """The ListOffsets response: each asked partition's offset, or its error."""
        answers: dict[tuple[str, int], Found] = {}
        lookups: list[Lookup] = []
        asked = collections.Counter(
            (topic.name, p.partition_index) for topic in body.topics for p in topic.partitions
        )
        for topic in body.topics:
            for asked_partition in topic.partitions:
                key = (topic.name, asked_partition.partition_index)
                if asked[key] > 1:
                    # Kafka's answer to a partition listed twice.
                    answers[key] = Found(error=ErrorCode.invalid_request)
                    continue
                known = self._known(topic.name, asked_partition, allowed)
                if isinstance(known, Found):
                    answers[key] = known
                else:
                    lookups.append(known)
        if lookups:
            found = await off_loop(search, self.sink, lookups)
            answers.update(found)
        return {
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        _partition(p.partition_index, answers[(topic.name, p.partition_index)])
                        for p in topic.partitions
                    ],
                }
                for topic in body.topics
            ]
        }

    def _known(self, topic: str, asked: Any, allowed: Callable[[str], bool]) -> Found | Lookup:
        """The answer known without the store, or the lookup that finds it."""
        if not allowed(topic):
            return Found(error=ErrorCode.topic_authorization_failed)
        if topic in self.topics.unopened:
            return Found(error=ErrorCode.kafka_storage_error)
        count = self.topics.partitions.get(topic)
        partition = asked.partition_index
        if count is None or not 0 <= partition < count:
            return Found(error=ErrorCode.unknown_topic_or_partition)
        if getattr(asked, "current_leader_epoch", -1) > LEADER_EPOCH:
            # A client that saw a later epoch than this node has ever had.
            return Found(error=ErrorCode.unknown_leader_epoch)
        timestamp = asked.timestamp
        if timestamp == LATEST_TIERED:
            # Nothing here is tiered (Kafka's answer for a topic without remote storage).
            return Found()
        state = self.sink.partitions.get((topic, partition))
        if state is None:
            # A dead-letter partition no letter opened yet: the manifest alone knows it.
            return Lookup(topic, partition, timestamp, seal=False, durable=-1)
        if timestamp == LATEST:
            return Found(offset=state.durable_to)
        # Records below durable_to the writer holds unsealed; the store search needs them.
        return Lookup(
            topic,
            partition,
            timestamp,
            seal=state.sealed_to < state.durable_to and timestamp not in (EARLIEST, EARLIEST_LOCAL),
            durable=state.durable_to,
        )


def search(sink: ProduceSink, lookups: list[Lookup]) -> dict[tuple[str, int], Found]:
    """Each lookup's answer from the store (a blocking call: off the event loop)."""
    answers: dict[tuple[str, int], Found] = {}
    spans: dict[str, dict[int, Any]] = {}
    left = []
    for lookup in lookups:
        if lookup.seal and lookup.timestamp != MAX_TIMESTAMP:
            # The records not sealed yet all come after the sealed ones: a time found in
            # these is the first one, and nothing needs sealing for it.
            found = _answered(sink.store, lookup, spans)
            if found.error is not ErrorCode.none or found.offset != UNKNOWN:
                answers[(lookup.topic, lookup.partition)] = found
                continue
        left.append(lookup)
    failed = _seal(sink, [lk for lk in left if lk.seal])
    for lookup in left:
        key = (lookup.topic, lookup.partition)
        answers[key] = (
            Found(error=failed[key]) if key in failed else _answered(sink.store, lookup, spans)
        )
    return answers


def _answered(store: Store, lookup: Lookup, spans: dict[str, dict[int, Any]]) -> Found:
    """The lookup's answer from what is sealed now, or the error reading it met."""
    try:
        if lookup.topic not in spans:
            spans[lookup.topic] = {s.partition: s for s in store.spans(lookup.topic)}
        return _answer(store, lookup, spans[lookup.topic].get(lookup.partition))
    except Exception as exc:  # this partition's answer: the others still get theirs
        log.warning(
            "list_offsets_failed",
            topic=lookup.topic,
            partition=lookup.partition,
            timestamp=lookup.timestamp,
            error=str(exc),
            error_type=type(exc).__name__,
        )
        return Found(error=ErrorCode.kafka_storage_error)


def _seal(sink: ProduceSink, lookups: Iterable[Lookup]) -> dict[tuple[str, int], ErrorCode]:
    """Seal the lookups' partitions; those that did not seal, with their answer."""
    keys = [(lk.topic, lk.partition) for lk in lookups]
    if not keys:
        return {}
    try:
        sink.writer.flush(keys, timeout_s=SEAL_WAIT_S)
    except FlushTimeoutError as exc:
        return dict.fromkeys(exc.pending, ErrorCode.request_timed_out)
    except PlateauError as exc:  # the journal failed: nothing more seals until a restart
        log.warning("list_offsets_unsealed", partitions=len(keys), error=str(exc))
        return dict.fromkeys(keys, ErrorCode.kafka_storage_error)
    return {}


def _answer(store: Store, lookup: Lookup, span: Any) -> Found:
    timestamp = lookup.timestamp
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        if span is None:
            return Found(offset=0)
        first = span.start_offset if span.start_offset is not None else span.next_offset
        return Found(offset=first)
    if timestamp == LATEST:  # a partition without a state: its sealed watermark
        return Found(offset=0 if span is None else span.next_offset)
    if timestamp == MAX_TIMESTAMP:
        newest = _first(store, lookup, order_by="timestamp", order="desc")
        if newest.offset == UNKNOWN:
            return newest
        # Kafka answers the first record holding the largest timestamp.
        timestamp = newest.timestamp
    return _first(store, lookup, time_start=timestamp if timestamp > 0 else None)


def _first(store: Store, lookup: Lookup, **read: Any) -> Found:
    """The first record below the high watermark, in the order `read` asks for."""
    table = store.read(
        lookup.topic,
        partitions=[lookup.partition],
        # Records sealed since the lookup began may lie above the watermark it reported.
        end_offset=lookup.durable if lookup.durable >= 0 else None,
        columns=[OFFSET, TIMESTAMP],
        limit=1,
        **read,
    ).to_table()
    if table.num_rows == 0:
        return Found()
    stamp = table.column(TIMESTAMP).cast(pa.int64())[0].as_py()
    return Found(
        offset=table.column(OFFSET)[0].as_py(), timestamp=UNKNOWN if stamp is None else stamp
    )


def _partition(index: int, found: Found) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": found.error,
        "timestamp": found.timestamp,
        "offset": found.offset,
        "leader_epoch": LEADER_EPOCH if found.error is ErrorCode.none else -1,
    }
