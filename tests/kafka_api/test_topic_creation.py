"""Creating topics through the listener (CreateTopics, or a produce or a Metadata request
with auto_create_topics) while producers write to other topics: opening a new topic's
partitions (a lock, a folder recovered and manifest reads per partition, some 5 ms each)
must not hold every other connection back. A topic of 10 000 partitions took the listener
away for a minute, and kafka-topics.sh --create timed out meanwhile."""

from __future__ import annotations

import errno
import select
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from sqlalchemy.exc import OperationalError
from structlog.testing import capture_logs

from bridge.kafka_api.server import KafkaApiServer
from plateau_core import Append
from plateau_core.errors import BackpressureError, InvalidInputError
from tests.kafka_api.support import (
    RawClient,
    api_config,
    listening,
    produce_body,
    record_batch,
    stored,
)


@contextmanager
def held_open(server: KafkaApiServer, topic: str) -> Iterator[threading.Event]:
    """While the block runs, acquiring a partition of `topic` waits for the event it yields
    (set at the end at the latest, so the listener can stop)."""
    assert server.sink is not None
    writer = server.sink.writer
    acquire = writer.acquire
    release = threading.Event()

    def waiting(name: str, partition: int, **kwargs: Any) -> int | None:
        if name == topic:
            release.wait(120)
        return acquire(name, partition, **kwargs)

    writer.acquire = waiting  # type: ignore[method-assign]
    try:
        yield release
    finally:
        release.set()


def produce(bootstrap: str, topic: str, count: int, **settings: Any) -> list[Message]:
    delivered: list[Message] = []
    failed: list[KafkaError] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20_000, **settings}
    )
    for i in range(count):
        producer.produce(
            topic,
            key=b"k%d" % i,
            value=b"v%d" % i,
            on_delivery=lambda e, m: failed.append(e) if e is not None else delivered.append(m),
        )
    producer.flush(30)
    assert failed == []
    return delivered


def test_producers_go_on_while_a_topic_is_created(tmp_path: Path) -> None:
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        with held_open(server, "big") as release:
            creating = admin.create_topics([NewTopic("big", 4)], request_timeout=60)["big"]
            # While the new topic's partitions are being opened, the listener answers
            # everything else: a topic listing and an acks=all produce to another topic. Asked
            # by another client: a connection's answers go out in the order of its requests,
            # and `admin` may send its listing on the connection waiting for the creation.
            other = AdminClient({"bootstrap.servers": bootstrap})
            listed = other.list_topics(timeout=20).topics
            assert "events" in listed and "big" not in listed
            assert len(produce(bootstrap, "events", 50)) == 50
            # A second creation of the same name is told it exists.
            again = other.create_topics([NewTopic("big", 4)])["big"]
            try:
                again.result(20)
                raise AssertionError("the second creation of 'big' succeeded")
            except KafkaException as exc:
                assert exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
            assert not creating.done()
            release.set()
            creating.result(60)
        assert len(admin.list_topics(timeout=20).topics["big"].partitions) == 4
        delivered = produce(bootstrap, "big", 40)
    assert stored(tmp_path / "store", "events").num_rows == 50
    table = stored(tmp_path / "store", "big")
    assert sorted(table.column("key").to_pylist()) == sorted(m.key() for m in delivered)


def test_a_produce_to_a_topic_being_created_lands_once_it_is_open(tmp_path: Path) -> None:
    """auto_create_topics: a producer's first records to a new topic wait for its
    partitions, and the producers of other topics do not."""
    config = api_config(tmp_path / "store", auto_create_topics=True, default_partitions=2)
    with listening(config) as (server, bootstrap):
        with held_open(server, "fresh") as release:
            first: list[Message] = []
            writer = threading.Thread(
                target=lambda: first.extend(produce(bootstrap, "fresh", 30)), daemon=True
            )
            writer.start()
            assert len(produce(bootstrap, "events", 50)) == 50
            assert writer.is_alive()
            release.set()
            writer.join(60)
        assert len(first) == 30
        assert server.sink is not None and server.sink.topics.partitions["fresh"] == 2
    table = stored(tmp_path / "store", "fresh")
    assert sorted(table.column("key").to_pylist()) == sorted(m.key() for m in first)
    assert stored(tmp_path / "store", "events").num_rows == 50


def test_a_topic_being_created_when_the_listener_stops_is_let_go_with_the_rest(
    tmp_path: Path,
) -> None:
    """The listener stops while a new topic's partitions are being opened: the stop waits
    for them and releases them with the others, so the next start can take them. Opened
    after the writer closed, their partition locks stayed with the process."""
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        writer = server.sink.writer
        close = writer.close
        closed = threading.Event()

        def closing(*args: Any, **kwargs: Any) -> None:
            close(*args, **kwargs)
            closed.set()

        writer.close = closing  # type: ignore[method-assign]
        with held_open(server, "big") as release:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("big", 2)])
            stopping = threading.Thread(target=server.stop, daemon=True)
            while server.sink.creation.creating("big") is False:
                threading.Event().wait(0.01)
            stopping.start()
            # The writer must not close before the topic is open: given the time to,
            # it would, and the partitions would then be acquired after it.
            assert not closed.wait(5)
            release.set()
            stopping.join(60)
        assert closed.is_set()
    with listening(config) as (_server, bootstrap):
        delivered = produce(bootstrap, "big", 20)
    assert stored(tmp_path / "store", "big").num_rows == len(delivered) == 20


PRODUCE, METADATA, CREATE_TOPICS = 0, 3, 19


@contextmanager
def failing_open(server: KafkaApiServer, topic: str, error: Exception) -> Iterator[None]:
    """While the block runs, acquiring a partition of `topic` raises `error` (a folder that
    cannot be made, a name the store refuses)."""
    assert server.sink is not None
    writer = server.sink.writer
    acquire = writer.acquire

    def failing(name: str, partition: int, **kwargs: Any) -> int | None:
        if name == topic:
            raise error
        return acquire(name, partition, **kwargs)

    writer.acquire = failing  # type: ignore[method-assign]
    try:
        yield
    finally:
        writer.acquire = acquire  # type: ignore[method-assign]


def creatable(name: str, partitions: int) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }


def create_topics(
    client: RawClient, topics: list[dict[str, Any]], timeout_ms: int, validate_only: bool = False
) -> dict[str, Any]:
    body = {"topics": topics, "timeout": timeout_ms, "validate_only": validate_only}
    answer = client.call(CREATE_TOPICS, 7, body)
    return {t.name: t for t in answer.topics}


STORAGE = OSError(errno.EACCES, "Permission denied")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (STORAGE, ErrorCode.kafka_storage_error),
        (OperationalError("SELECT", {}, Exception("database is locked")), None),
        (InvalidInputError("the store refuses it"), ErrorCode.invalid_topic_exception),
        (RuntimeError("unforeseen"), ErrorCode.unknown_server_error),
    ],
)
def test_a_topic_that_cannot_be_opened_is_answered_per_partition(
    tmp_path: Path, error: Exception, code: ErrorCode | None
) -> None:
    """A produce creating a topic whose partitions cannot be opened gets the protocol's
    error for that partition, and the other partitions of the request their answers: the
    connection closed without one left the records it took unacknowledged, and a producer
    sent them again. Once the store can open it, the next produce creates the topic."""
    config = api_config(tmp_path / "store", auto_create_topics=True, default_partitions=1)
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        creation = server.sink.creation
        now = [0.0]
        creation.clock = lambda: now[0]
        client = RawClient(bootstrap)
        body = produce_body("events", 0, record_batch([b"taken"]), acks=1)
        body["topic_data"].append(
            {"name": "fresh", "partition_data": [{"index": 0, "records": record_batch([b"x"])}]}
        )
        if isinstance(error, OperationalError):
            # The manifest, not the disk: recording the topic fails.
            topics = server.sink.topics
            record = topics.record

            def unavailable(*args: Any, **kwargs: Any) -> int:
                raise error

            topics.record = unavailable  # type: ignore[method-assign]
            try:
                answer = client.call(PRODUCE, 9, body)
            finally:
                topics.record = record  # type: ignore[method-assign]
            code = ErrorCode.kafka_storage_error
        else:
            with failing_open(server, "fresh", error):
                answer = client.call(PRODUCE, 9, body)
        by_topic = {t.name: t.partition_responses[0] for t in answer.responses}
        assert (by_topic["events"].error_code, by_topic["events"].base_offset) == (
            ErrorCode.none,
            0,
        )
        assert by_topic["fresh"].error_code == code
        assert by_topic["fresh"].error_message
        assert "fresh" not in server.sink.topics.partitions
        now[0] += creation.retry_s  # tried again after a pause
        again = client.call(PRODUCE, 9, produce_body("fresh", 0, record_batch([b"y"])))
        assert again.responses[0].partition_responses[0].error_code == ErrorCode.none
        client.close()
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"taken"]
    assert stored(tmp_path / "store", "fresh").column("value").to_pylist() == [b"y"]


def test_create_topics_and_metadata_answer_a_topic_that_cannot_be_opened(tmp_path: Path) -> None:
    """CreateTopics and an auto-creating Metadata answer the topic that failed with its
    error, and the others of the request as usual."""
    config = api_config(tmp_path / "store", auto_create_topics=True)
    with listening(config) as (server, bootstrap):
        client = RawClient(bootstrap)
        with failing_open(server, "broken", STORAGE):
            created = create_topics(client, [creatable("broken", 2), creatable("fine", 2)], 10_000)
            metadata = client.call(
                METADATA,
                12,
                {
                    "topics": [{"name": "broken"}, {"name": "events"}],
                    "allow_auto_topic_creation": True,
                    "include_topic_authorized_operations": False,
                },
            )
        assert created["broken"].error_code == ErrorCode.kafka_storage_error
        assert created["fine"].error_code == ErrorCode.none
        listed = {t.name: t for t in metadata.topics}
        assert listed["broken"].error_code == ErrorCode.kafka_storage_error
        assert len(listed["events"].partitions) == 2
        assert create_topics(client, [creatable("broken", 2)], 10_000)["broken"].error_code == (
            ErrorCode.none
        )
        client.close()


def test_batches_the_writer_did_not_take_before_a_topic_opened_hold_the_request_back(
    tmp_path: Path,
) -> None:
    """A request's batches handed to the writer before a new topic opens, which the writer
    could not take then (at its memory budget), hold its connection back as the rest of the
    request does: it is answered once the writer took them (Kafka's quota behaviour). It
    was answered at once, the producer sending more while they waited in memory."""
    config = api_config(tmp_path / "store", auto_create_topics=True, default_partitions=1)
    with listening(config) as (server, bootstrap):
        sink = server.sink
        assert sink is not None
        writer = sink.writer
        append_group = writer.append_group
        full = threading.Event()
        full.set()
        fresh_taken = threading.Event()

        def at_budget_for_events(appends: list[Append]) -> int | None:
            if full.is_set() and any(a.topic == "events" for a in appends):
                raise BackpressureError("events", 0, "memory_budget", "the budget is reached")
            if any(a.topic == "fresh" for a in appends):
                fresh_taken.set()
            return append_group(appends)

        writer.append_group = at_budget_for_events  # type: ignore[method-assign]
        client = RawClient(bootstrap)
        body = produce_body("events", 0, record_batch([b"a"]), acks=1)
        body["topic_data"].append(
            {"name": "fresh", "partition_data": [{"index": 0, "records": record_batch([b"x"])}]}
        )
        client.send_frame(client.request_frame(PRODUCE, 9, body))
        assert fresh_taken.wait(20)
        # The rest of the request is in the writer; the connection waits for the events
        # batch, however long this looks for an answer.
        if not select.select([client.sock], [], [], 0.5)[0]:
            full.clear()
            sink.on_capacity()
        response = client.response(PRODUCE, 9)
        still_waiting = list(sink.partitions[("events", 0)].stalled)
        assert still_waiting == [], "answered while its events batch waited for the writer"
        codes = {t.name: t.partition_responses[0].error_code for t in response.responses}
        assert codes == {"events": ErrorCode.none, "fresh": ErrorCode.none}
        client.close()
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"a"]
    assert stored(tmp_path / "store", "fresh").column("value").to_pylist() == [b"x"]


def test_create_topics_answers_by_its_timeout_and_goes_on_creating(tmp_path: Path) -> None:
    """A creation longer than the request's timeout_ms (thousands of partitions) is answered
    REQUEST_TIMED_OUT by then, as Kafka answers, and goes on: the topic is listed once its
    partitions are open. Unanswered, the Java admin client gave up at its own timeout and
    its retry was told the topic already exists. A timeout of 0 asks for no wait at all
    (librdkafka's default, which reads that answer as success)."""
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        client = RawClient(bootstrap)
        with held_open(server, "big") as release:
            waited = create_topics(client, [creatable("big", 3), creatable("big", 3)], 300)
            assert waited["big"].error_code == ErrorCode.invalid_request
            answer = create_topics(client, [creatable("big", 3)], 300)["big"]
            assert answer.error_code == ErrorCode.request_timed_out
            assert answer.error_message
            checked = create_topics(client, [creatable("other", 2)], 300, validate_only=True)
            assert checked["other"].error_code == ErrorCode.none
            at_once = create_topics(client, [creatable("big", 3), creatable("next", 1)], 0)
            assert at_once["big"].error_code == ErrorCode.topic_already_exists
            assert at_once["next"].error_code == ErrorCode.request_timed_out
            assert "big" not in server.sink.topics.partitions
            release.set()
            while server.sink.creation.creating("big") or server.sink.creation.creating("next"):
                threading.Event().wait(0.01)
        assert server.sink.topics.partitions["big"] == 3
        assert server.sink.topics.partitions["next"] == 1
        assert "other" not in server.sink.topics.partitions
        client.close()


def test_names_kafka_would_call_colliding_are_separate_topics(tmp_path: Path) -> None:
    """Kafka refuses 'metrics_eu' beside 'metrics.eu' (its metric names would clash).
    plateau keeps the exact name in folders, manifest rows and metric labels, so it takes
    both, as separate topics."""
    config = api_config(tmp_path / "store")
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        for topic, value in (("metrics.eu", b"dot"), ("metrics_eu", b"underscore")):
            created = create_topics(client, [creatable(topic, 1)], 10_000)[topic]
            assert created.error_code == ErrorCode.none
            answer = client.call(PRODUCE, 9, produce_body(topic, 0, record_batch([value])))
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        client.close()
    assert stored(tmp_path / "store", "metrics.eu").column("value").to_pylist() == [b"dot"]
    assert stored(tmp_path / "store", "metrics_eu").column("value").to_pylist() == [b"underscore"]


def test_a_roll_up_topic_is_not_created_by_a_client(tmp_path: Path) -> None:
    """`{topic}.rollup.{granularity}` is written by the seals of its topic: records produced
    to it took the same offsets in the same folder, and the roll-up's segment was overwritten
    (found corrupt and quarantined at the next read)."""
    config = api_config(
        tmp_path / "store",
        [
            {
                "name": "app-logs",
                "partitions": 1,
                "format": "json",
                "rollups": [{"granularity": "1m", "metrics": ["count"]}],
            }
        ],
        auto_create_topics=True,
    )
    derived = "app-logs.rollup.1m"
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        created = create_topics(client, [creatable(derived, 1)], 10_000)[derived]
        assert created.error_code == ErrorCode.invalid_topic_exception
        assert "roll-up" in created.error_message
        answer = client.call(PRODUCE, 9, produce_body(derived, 0, record_batch([b"x"])))
        refused = answer.responses[0].partition_responses[0]
        assert refused.error_code == ErrorCode.invalid_topic_exception
        answer = client.call(PRODUCE, 9, produce_body("app-logs", 0, record_batch([b'{"a": 1}'])))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        client.close()
    assert stored(tmp_path / "store", derived).column("count").to_pylist() == [1]


def test_a_dead_letter_partition_that_cannot_be_opened_refuses_only_its_batch(
    tmp_path: Path,
) -> None:
    """A dead-letter partition is opened at its first letter; when that fails, the batch
    with the letters gets the protocol's error (nothing of it lands), and the request's
    other partitions their answers. The connection closed without one left them
    unacknowledged, though their records landed."""
    config = api_config(
        tmp_path / "store",
        [
            {"name": "events", "partitions": 1},
            {
                "name": "lenient",
                "partitions": 1,
                "format": "json",
                "on_error": "dlq",
                "dlq": "lenient-dlq",
            },
        ],
    )
    mixed = record_batch([b'{"n": 1}', b"bad"])
    body = produce_body("events", 0, record_batch([b"taken"]))
    body["topic_data"].append(
        {"name": "lenient", "partition_data": [{"index": 0, "records": mixed}]}
    )
    with listening(config) as (server, bootstrap):
        client = RawClient(bootstrap)
        with failing_open(server, "lenient-dlq", STORAGE):
            answer = client.call(PRODUCE, 9, body)
        by_topic = {t.name: t.partition_responses[0] for t in answer.responses}
        assert by_topic["events"].error_code == ErrorCode.none
        assert by_topic["lenient"].error_code == ErrorCode.kafka_storage_error
        assert "lenient-dlq" in by_topic["lenient"].error_message
        retried = client.call(PRODUCE, 9, produce_body("lenient", 0, mixed))
        assert retried.responses[0].partition_responses[0].error_code == ErrorCode.none
        client.close()
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"taken"]
    assert stored(tmp_path / "store", "lenient").column("n").to_pylist() == [1]
    assert stored(tmp_path / "store", "lenient-dlq").column("value").to_pylist() == [b"bad"]


def test_a_created_topic_whose_partitions_do_not_open_at_start_leaves_the_rest_serving(
    tmp_path: Path,
) -> None:
    """A topic created through the API whose folder is broken when the listener starts is
    answered KAFKA_STORAGE_ERROR, the other topics as usual, and the next request naming
    it opens it once the folder is mended. The listener did not start at all."""
    config = api_config(tmp_path / "store")
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        assert create_topics(client, [creatable("fresh", 2)], 10_000)["fresh"].error_code == (
            ErrorCode.none
        )
        first = client.call(PRODUCE, 9, produce_body("fresh", 0, record_batch([b"before"])))
        assert first.responses[0].partition_responses[0].error_code == ErrorCode.none
        client.close()
    broken = tmp_path / "store" / "topics" / "fresh" / "1"
    shutil.rmtree(broken)
    broken.write_bytes(b"not a folder")
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        creation = server.sink.creation
        now = [0.0]
        creation.clock = lambda: now[0]
        client = RawClient(bootstrap)
        events = client.call(PRODUCE, 9, produce_body("events", 0, record_batch([b"e"])))
        assert events.responses[0].partition_responses[0].error_code == ErrorCode.none
        refused = client.call(PRODUCE, 9, produce_body("fresh", 0, record_batch([b"x"])))
        assert refused.responses[0].partition_responses[0].error_code == (
            ErrorCode.kafka_storage_error
        )
        listed = client.call(
            METADATA,
            12,
            {
                "topics": None,
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        codes = {t.name: t.error_code for t in listed.topics}
        assert codes == {"events": ErrorCode.none, "fresh": ErrorCode.kafka_storage_error}
        broken.unlink()
        now[0] += creation.retry_s  # tried again after a pause
        again = client.call(PRODUCE, 9, produce_body("fresh", 0, record_batch([b"after"])))
        (answer,) = again.responses[0].partition_responses
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 1)
        client.close()
    assert stored(tmp_path / "store", "fresh").column("value").to_pylist() == [b"before", b"after"]
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"e"]


def test_a_configured_topic_whose_partitions_do_not_open_stops_the_start(
    tmp_path: Path,
) -> None:
    """The config names it: the operator learns at once, as before."""
    config = api_config(tmp_path / "store")
    with listening(config):
        pass
    broken = tmp_path / "store" / "topics" / "events" / "1"
    shutil.rmtree(broken)
    broken.write_bytes(b"not a folder")
    with pytest.raises(FileExistsError), listening(config):
        pass


def test_a_topic_that_does_not_open_is_tried_again_after_a_pause_not_on_every_request(
    tmp_path: Path,
) -> None:
    """Clients refresh metadata every few hundred ms while a topic answers an error: each
    Metadata or produce request naming the broken topic tried to open it again, a manifest
    write and an error in the log each time. It is tried again once `retry_s` passed since
    the first failure (longer after later ones), and answered the same error meanwhile."""
    config = api_config(tmp_path / "store")
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        create_topics(client, [creatable("fresh", 2)], 10_000)
        client.close()
    broken = tmp_path / "store" / "topics" / "fresh" / "1"
    shutil.rmtree(broken)
    broken.write_bytes(b"not a folder")
    listing = {
        "topics": [{"name": "fresh", "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        creation = server.sink.creation
        now = [0.0]
        creation.clock = lambda: now[0]
        client = RawClient(bootstrap)
        with capture_logs() as logs:
            for _ in range(5):
                listed = client.call(METADATA, 12, listing)
                assert listed.topics[0].error_code == ErrorCode.kafka_storage_error
                refused = client.call(PRODUCE, 9, produce_body("fresh", 0, record_batch([b"x"])))
                assert refused.responses[0].partition_responses[0].error_code == (
                    ErrorCode.kafka_storage_error
                )
        events = [e["event"] for e in logs]
        assert (events.count("topic_open_failed"), events.count("topic_refused")) == (1, 1)
        # Asked by its id, which opens nothing, it is the same topic with the same error.
        by_id = client.call(
            METADATA,
            12,
            {**listing, "topics": [{"name": None, "topic_id": listed.topics[0].topic_id}]},
        )
        assert (by_id.topics[0].name, by_id.topics[0].error_code) == (
            "fresh",
            ErrorCode.kafka_storage_error,
        )
        broken.unlink()
        # Mended, but not tried again before the pause is over.
        early = client.call(METADATA, 12, listing)
        assert early.topics[0].error_code == ErrorCode.kafka_storage_error
        now[0] += creation.retry_s
        opened = client.call(METADATA, 12, listing)
        assert opened.topics[0].error_code == ErrorCode.none
        landed = client.call(PRODUCE, 9, produce_body("fresh", 1, record_batch([b"after"])))
        (answer,) = landed.responses[0].partition_responses
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
        client.close()
    assert stored(tmp_path / "store", "fresh").column("value").to_pylist() == [b"after"]


def test_a_produced_topic_removed_from_the_config_is_unknown_to_producers(tmp_path: Path) -> None:
    """Served on after a restart without it, a json topic turned raw: its producers' records
    landed undecoded, with no word of it."""
    data = tmp_path / "data"
    json_topic = {"name": "events", "partitions": 2, "format": "json"}
    with listening(api_config(data, [json_topic, {"name": "other"}])) as (_, bootstrap):
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for n in range(10):
            producer.produce("events", b'{"n": %d}' % n)
        assert producer.flush(30) == 0
    with listening(api_config(data, [{"name": "other"}])) as (_, bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert "events" not in admin.list_topics(timeout=10).topics
        failed: list[KafkaError] = []
        producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 3_000})
        producer.produce("events", b"raw", on_delivery=lambda e, m: failed.append(e))
        producer.flush(15)
        assert [e.code() for e in failed] in (
            [KafkaError.UNKNOWN_TOPIC_OR_PART],
            [KafkaError._UNKNOWN_TOPIC],
            [KafkaError._MSG_TIMED_OUT],
        )
        produce(bootstrap, "other", 3)  # the topics still listed are served
    table = stored(data, "events")
    assert table.num_rows == 10 and "n" in table.column_names  # the json rows, kept
