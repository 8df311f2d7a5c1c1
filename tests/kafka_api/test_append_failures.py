"""Batches the writer refuses for anything but memory (a disk error, records the store cannot
take, a fault): each is answered with the protocol's error for its partition, its offsets
and its producer's sequence are taken back, and the connection goes on. The request's
exception closed the connection unanswered while the batch stayed in memory, retried before
every later batch of its partition: it failed them the same way, or landed once the cause
went, and the producer's retry of the batch was stored twice."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bridge.kafka_api.server import KafkaApiServer
from plateau_core import Append, Store
from plateau_core.errors import BackpressureError, InvalidInputError
from tests.kafka_api.support import (
    RawClient,
    api_config,
    listening,
    produce_body,
    record_batch,
)

PRODUCE, INIT_PRODUCER_ID = 0, 22


def stored_values(data_dir: Path, topic: str, partition: int) -> list[bytes]:
    store = Store.open(data_dir)
    try:
        table = store.read(topic, partitions=[partition]).to_table()
    finally:
        store.close()
    return [row["value"] for row in sorted(table.to_pylist(), key=lambda row: row["offset"])]


def answers(response: Any) -> dict[tuple[str, int], Any]:
    return {(t.name, p.index): p for t in response.responses for p in t.partition_responses}


class Refusing:
    """The writer's append_group, raising what `refusal` gives for a group touching `topic`
    (None: the real writer takes it). `refused` is set once it raised."""

    def __init__(self, server: KafkaApiServer, topic: str, partition: int = 0) -> None:
        assert server.sink is not None
        self.writer = server.sink.writer
        self.append_group = self.writer.append_group
        self.key = (topic, partition)
        self.refusal: Callable[[], Exception] | None = None
        self.refused = threading.Event()
        self.writer.append_group = self  # type: ignore[method-assign]

    def __call__(self, appends: list[Append], **kwargs: Any) -> int | None:
        refusal = self.refusal
        if refusal is not None and any((a.topic, a.partition) == self.key for a in appends):
            self.refused.set()
            raise refusal()
        return self.append_group(appends, **kwargs)


def producer_id(client: RawClient) -> int:
    answer = client.call(
        INIT_PRODUCER_ID,
        4,
        {"transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1},
    )
    assert answer.error_code == ErrorCode.none
    return int(answer.producer_id)


@pytest.mark.parametrize(
    ("error", "code", "idempotent", "acks"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), ErrorCode.kafka_storage_error, False, 1),
        (InvalidInputError("refused"), ErrorCode.unknown_server_error, True, -1),
        (RuntimeError("unforeseen"), ErrorCode.unknown_server_error, False, -1),
    ],
)
def test_a_batch_the_writer_refuses_is_answered_and_lands_once_when_sent_again(
    tmp_path: Path, error: Exception, code: ErrorCode, idempotent: bool, acks: int
) -> None:
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        refusing = Refusing(server, "events", 0)
        client = RawClient(bootstrap)
        ids = {}
        if idempotent:
            ids = {"producer_id": producer_id(client), "epoch": 0, "sequence": 0}
        batch = record_batch([b"a", b"b"], **ids)
        body = produce_body("events", 0, batch, acks=acks)
        body["topic_data"][0]["partition_data"].append(
            {"index": 1, "records": record_batch([b"other"])}
        )
        refusing.refusal = lambda: error
        first = answers(client.call(PRODUCE, 9, body))
        assert first[("events", 0)].error_code == code
        assert first[("events", 0)].error_message
        assert (first[("events", 1)].error_code, first[("events", 1)].base_offset) == (
            ErrorCode.none,
            0,
        )
        refusing.refusal = None
        # The same connection: the producer sends the batch again (an idempotent one twice:
        # the second is a duplicate, answered with the first's offsets).
        for _ in range(2 if idempotent else 1):
            again = answers(client.call(PRODUCE, 9, produce_body("events", 0, batch, acks=acks)))
            assert (again[("events", 0)].error_code, again[("events", 0)].base_offset) == (
                ErrorCode.none,
                0,
            )
        after = answers(client.call(PRODUCE, 9, produce_body("events", 0, record_batch([b"c"]))))
        assert after[("events", 0)].base_offset == 2
        client.close()
        # The refused batch counts once as stored, when it landed, and its duplicate not
        # again; the refusal counts its records as failed. /metrics' counters cannot go down.
        landed = [batch, record_batch([b"c"]), record_batch([b"other"])]
        assert server.stats.records == {"events": 4}
        assert server.stats.bytes == {"events": sum(len(b) for b in landed)}
        assert server.stats.failed_records == {"events": 2}
        assert server.stats.duplicates == (1 if idempotent else 0)
    assert stored_values(tmp_path / "store", "events", 0) == [b"a", b"b", b"c"]
    assert stored_values(tmp_path / "store", "events", 1) == [b"other"]


def test_a_refused_first_batch_of_a_producer_is_still_the_one_its_next_must_follow(
    tmp_path: Path,
) -> None:
    """A producer with no state here may start at any sequence (one forgotten after its
    expiry goes on where it was). When the writer refuses that first batch, the producer's
    next one, already sent, must not land in its place: it is refused until the first is
    sent again."""
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        refusing = Refusing(server, "events", 0)
        client = RawClient(bootstrap)
        pid = producer_id(client)
        first = record_batch([b"a", b"b"], producer_id=pid, epoch=0, sequence=7)
        second = record_batch([b"c"], producer_id=pid, epoch=0, sequence=9)
        refusing.refusal = lambda: OSError(errno.EIO, "Input/output error")
        refused = answers(client.call(PRODUCE, 9, produce_body("events", 0, first)))
        assert refused[("events", 0)].error_code == ErrorCode.kafka_storage_error
        refusing.refusal = None
        early = answers(client.call(PRODUCE, 9, produce_body("events", 0, second)))
        assert early[("events", 0)].error_code == ErrorCode.out_of_order_sequence_number
        for batch, offset in ((first, 0), (second, 2)):
            landed = answers(client.call(PRODUCE, 9, produce_body("events", 0, batch)))
            assert (landed[("events", 0)].error_code, landed[("events", 0)].base_offset) == (
                ErrorCode.none,
                offset,
            )
        client.close()
    assert stored_values(tmp_path / "store", "events", 0) == [b"a", b"b", b"c"]


def test_a_stalled_batch_the_writer_then_refuses_answers_its_request(tmp_path: Path) -> None:
    """A batch waiting for the writer's memory, refused for something else when retried,
    answers the request that sent it with the error; the partition takes the next batch at
    the offset it had."""
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        sink = server.sink
        assert sink is not None
        refusing = Refusing(server, "events", 0)
        refusing.refusal = lambda: BackpressureError("events", 0, "memory_budget", "full")
        client = RawClient(bootstrap)
        client.send_frame(
            client.request_frame(PRODUCE, 9, produce_body("events", 0, record_batch([b"a"])))
        )
        assert refusing.refused.wait(20)
        refusing.refusal = lambda: OSError(errno.EIO, "Input/output error")
        sink.on_capacity()
        answer = answers(client.response(PRODUCE, 9))[("events", 0)]
        assert answer.error_code == ErrorCode.kafka_storage_error
        refusing.refusal = None
        again = answers(client.call(PRODUCE, 9, produce_body("events", 0, record_batch([b"a"]))))
        assert (again[("events", 0)].error_code, again[("events", 0)].base_offset) == (
            ErrorCode.none,
            0,
        )
        client.close()
    assert stored_values(tmp_path / "store", "events", 0) == [b"a"]


DEAD_LETTERED = [
    {"name": "lenient", "partitions": 1, "format": "json", "on_error": "dlq", "dlq": "errors"},
    {"name": "errors", "partitions": 1},
]


def test_a_dead_letter_topic_produced_to_in_the_same_request_takes_both(tmp_path: Path) -> None:
    """Records produced to a topic that is also a dead-letter topic, with dead letters for
    it in the same request: the letters take offsets after the records'. They were handed
    to the writer ahead of them, which refused the whole request as out of order, and the
    connection closed unanswered."""
    body = produce_body("lenient", 0, record_batch([b'{"n": 1}', b"bad"]), acks=-1)
    body["topic_data"].append(
        {"name": "errors", "partition_data": [{"index": 0, "records": record_batch([b"own"])}]}
    )
    with listening(api_config(tmp_path / "store", DEAD_LETTERED)) as (_server, bootstrap):
        client = RawClient(bootstrap)
        answer = answers(client.call(PRODUCE, 9, body))
        client.close()
    assert answer[("lenient", 0)].error_code == ErrorCode.none
    assert (answer[("errors", 0)].error_code, answer[("errors", 0)].base_offset) == (
        ErrorCode.none,
        0,
    )
    assert stored_values(tmp_path / "store", "errors", 0) == [b"own", b"bad"]


def test_dead_letters_land_after_their_topics_own_stalled_records(tmp_path: Path) -> None:
    """Dead letters bound for a partition whose own records wait for the writer's memory
    land after them, whichever the writer is offered first once it has room. The letters
    landed first, at offsets above the records', and the writer then refused the records
    for good: their request was never answered, and every later batch of the partition
    failed the same way."""
    with listening(api_config(tmp_path / "store", DEAD_LETTERED)) as (server, bootstrap):
        sink = server.sink
        assert sink is not None
        refusing = Refusing(server, "errors", 0)
        refusing.refusal = lambda: BackpressureError("errors", 0, "memory_budget", "full")
        own = RawClient(bootstrap)
        own.send_frame(
            own.request_frame(PRODUCE, 9, produce_body("errors", 0, record_batch([b"own"])))
        )
        assert refusing.refused.wait(20)
        # The writer has room again; the next request reaches it before the stalled records
        # are retried.
        refusing.refusal = None
        lenient = RawClient(bootstrap)
        body = produce_body("lenient", 0, record_batch([b'{"n": 1}', b"bad"]))
        second = answers(lenient.call(PRODUCE, 9, body))[("lenient", 0)]
        sink.on_capacity()
        first = answers(own.response(PRODUCE, 9))[("errors", 0)]
        assert (first.error_code, second.error_code) == (ErrorCode.none, ErrorCode.none)
        later = answers(own.call(PRODUCE, 9, produce_body("errors", 0, record_batch([b"more"]))))
        assert later[("errors", 0)].error_code == ErrorCode.none
        own.close()
        lenient.close()
    assert stored_values(tmp_path / "store", "errors", 0) == [b"own", b"bad", b"more"]


def test_a_fault_taking_one_partitions_batch_answers_that_partition_only(tmp_path: Path) -> None:
    """A batch whose decoding fails unforeseen is answered UNKNOWN_SERVER_ERROR, and the
    request's other partitions as usual. The request's exception closed the connection
    unanswered after the partitions before it had landed: their retry stored them twice."""
    config = api_config(
        tmp_path / "store",
        [
            {"name": "events", "partitions": 1},
            {"name": "strict", "partitions": 1, "format": "json"},
        ],
    )
    with listening(config) as (server, bootstrap):
        sink = server.sink
        assert sink is not None
        state = sink.partitions[("strict", 0)]
        decode = state.decoder.decode

        def unforeseen(records: Any) -> Any:
            raise RuntimeError("unforeseen")

        state.decoder.decode = unforeseen  # type: ignore[method-assign]
        body = produce_body("events", 0, record_batch([b"a"]))
        body["topic_data"].append(
            {"name": "strict", "partition_data": [{"index": 0, "records": record_batch([b"{}"])}]}
        )
        client = RawClient(bootstrap)
        first = answers(client.call(PRODUCE, 9, body))
        assert first[("events", 0)].error_code == ErrorCode.none
        assert first[("strict", 0)].error_code == ErrorCode.unknown_server_error
        state.decoder.decode = decode  # type: ignore[method-assign]
        again = answers(
            client.call(PRODUCE, 9, produce_body("strict", 0, record_batch([b'{"n": 1}'])))
        )
        assert (again[("strict", 0)].error_code, again[("strict", 0)].base_offset) == (
            ErrorCode.none,
            0,
        )
        client.close()
    assert stored_values(tmp_path / "store", "events", 0) == [b"a"]


def test_a_batch_stalled_while_its_request_waits_for_another_partition_holds_the_answer(
    tmp_path: Path,
) -> None:
    """acks=1: a request whose first partition's batch stalls for the writer's memory while
    the request waits for its second partition to be taken is answered once the first is
    taken too. It was answered as stored at once, and when the writer then refused the
    batch its offsets went to the next batch: records acknowledged and never stored."""
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        sink = server.sink
        assert sink is not None
        refusing = Refusing(server, "events", 0)
        refusing.refusal = lambda: BackpressureError("events", 0, "memory_budget", "full")
        writer = sink.writer
        accepting = writer.accepting
        roomy = threading.Event()
        taken = threading.Event()

        def accepting_second(topic: str, partition: int) -> bool:
            if (topic, partition) == ("events", 1) and not roomy.is_set():
                return False
            return accepting(topic, partition)

        def append_group(appends: list[Append], **kwargs: Any) -> int | None:
            seq = refusing(appends, **kwargs)
            if any((a.topic, a.partition) == ("events", 1) for a in appends):
                taken.set()
            return seq

        writer.accepting = accepting_second  # type: ignore[method-assign]
        writer.append_group = append_group  # type: ignore[method-assign]
        body = produce_body("events", 0, record_batch([b"a"]), acks=1)
        body["topic_data"][0]["partition_data"].append(
            {"index": 1, "records": record_batch([b"other"])}
        )
        client = RawClient(bootstrap)
        client.send_frame(client.request_frame(PRODUCE, 9, body))
        assert refusing.refused.wait(20)
        roomy.set()
        assert taken.wait(20)
        refusing.refusal = lambda: OSError(errno.EIO, "Input/output error")
        sink.on_capacity()
        first = answers(client.response(PRODUCE, 9))
        assert first[("events", 1)].error_code == ErrorCode.none
        assert first[("events", 0)].error_code == ErrorCode.kafka_storage_error
        refusing.refusal = None
        again = answers(
            client.call(PRODUCE, 9, produce_body("events", 0, record_batch([b"b"]), acks=1))
        )
        assert (again[("events", 0)].error_code, again[("events", 0)].base_offset) == (
            ErrorCode.none,
            0,
        )
        client.close()
    assert stored_values(tmp_path / "store", "events", 0) == [b"b"]


@pytest.mark.parametrize("crossed", [True, False], ids=["each-others", "its-own"])
def test_dead_letter_topics_in_a_circle_land_their_stalled_batches_together(
    tmp_path: Path, crossed: bool
) -> None:
    """Two topics each the other's dead-letter topic (or one its own, written twice in a
    request), with poison records in both batches of a request the writer first has no
    room for: once it has, both land, and so do the partitions' later batches. One by one,
    a batch's letters took offsets above the other partition's own stalled batch, which the
    writer refused as out of order; its offsets taken back below the letters', every later
    batch of that partition was refused too."""
    if crossed:
        topics = [
            {"name": "a", "partitions": 1, "format": "json", "on_error": "dlq", "dlq": "b"},
            {"name": "b", "partitions": 1, "format": "json", "on_error": "dlq", "dlq": "a"},
        ]
        second = "b"
    else:
        topics = [{"name": "a", "partitions": 1, "format": "json", "on_error": "dlq", "dlq": "a"}]
        second = "a"
    with listening(api_config(tmp_path / "store", topics)) as (server, bootstrap):
        refusing = Refusing(server, "a", 0)

        def once() -> Exception:
            refusing.refusal = None
            return BackpressureError("a", 0, "memory_budget", "full")

        refusing.refusal = once
        body = produce_body("a", 0, record_batch([b'{"n": 1}', b"bad-a"]))
        body["topic_data"].append(
            {
                "name": second,
                "partition_data": [{"index": 0, "records": record_batch([b'{"n": 2}', b"bad-2"])}],
            }
        )
        client = RawClient(bootstrap)
        response = client.call(PRODUCE, 9, body)
        codes = [p.error_code for t in response.responses for p in t.partition_responses]
        assert codes == [ErrorCode.none, ErrorCode.none]
        later = answers(client.call(PRODUCE, 9, produce_body("a", 0, record_batch([b'{"n": 3}']))))
        assert later[("a", 0)].error_code == ErrorCode.none
        client.close()
    with Store.open(tmp_path / "store") as store:
        offsets = sorted(store.read("a").to_table().column("offset").to_pylist())
    # Each batch's two offsets (one of them a poison record's), the letters, the later batch.
    assert offsets == ([0, 2, 3] if crossed else [0, 2, 4, 5, 6])
