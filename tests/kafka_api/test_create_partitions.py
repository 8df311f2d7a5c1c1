"""CreatePartitions: a topic created through the API grows (librdkafka's AdminClient, Apache
Kafka's kafka-topics.sh --alter), its new partitions take records and are there after a
restart; what Kafka refuses, and a topic the config sets, are refused with Kafka's codes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.errors import ErrorCode

from plateau_core import Store
from tests.kafka_api.support import RawClient, api_config, listening, stored
from tests.kafka_api.test_security import allowlisted, limited_admin, refusal
from tests.kafka_api.test_tools import java_tool
from tests.kafka_api.test_topic_creation import held_open, produce

pytestmark = pytest.mark.integration

CREATE_PARTITIONS = 37


def grow(admin: AdminClient, topic: str, count: int, **options: Any) -> Any:
    """The future of one topic's CreatePartitions answer."""
    [future] = admin.create_partitions([NewPartitions(topic, count)], **options).values()
    return future


def partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=15).topics[topic].partitions)


def test_a_created_topic_grows_and_its_new_partitions_take_records(tmp_path: Path) -> None:
    config = api_config(tmp_path / "store")
    with listening(config) as (_server, bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        [created] = admin.create_topics([NewTopic("grown", 2)], operation_timeout=15).values()
        created.result(15)
        assert grow(admin, "grown", 5, validate_only=True).result(15) is None
        assert partition_count(admin, "grown") == 2  # validate_only changes nothing
        assert grow(admin, "grown", 5, operation_timeout=15).result(15) is None
        assert partition_count(admin, "grown") == 5
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce("grown", value=b"last", partition=4)
        assert producer.flush(30) == 0
        delivered = produce(bootstrap, "grown", 40)
        assert {m.partition() for m in delivered} & {2, 3, 4}  # keys spread over all five
        del admin, producer  # before the listener stops: they would retry it in the log
    with listening(config) as (_server, bootstrap):  # recorded: a restart keeps the count
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert partition_count(admin, "grown") == 5
        del admin
    assert stored(tmp_path / "store", "grown").num_rows == 41
    store = Store.open(tmp_path / "store")
    try:
        last = store.read("grown", partitions=[4]).to_table().column("value").to_pylist()
    finally:
        store.close()
    assert b"last" in last


def test_kafka_topics_alter(tmp_path: Path) -> None:
    """Apache Kafka's own tool, with the Java admin client."""
    config = api_config(tmp_path / "store")
    with listening(config) as (_server, bootstrap):

        def topics(*args: str) -> Any:
            return java_tool(
                "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, *args
            )

        assert topics("--create", "--topic", "logs", "--partitions", "1").returncode == 0
        grown = topics("--alter", "--topic", "logs", "--partitions", "3")
        assert grown.returncode == 0, grown.stderr
        described = topics("--describe", "--topic", "logs")
        assert "PartitionCount: 3" in described.stdout, described.stdout
        shrunk = topics("--alter", "--topic", "logs", "--partitions", "2")
        assert shrunk.returncode != 0
        assert "InvalidPartitionsException" in shrunk.stderr + shrunk.stdout
        assert "a partition count never shrinks" in shrunk.stderr + shrunk.stdout


def test_what_does_not_grow(tmp_path: Path) -> None:
    """Kafka's answers, per topic; a topic the config lists grows in the config file."""
    config = api_config(tmp_path / "store", auto_create_topics=True)
    with listening(config) as (_server, bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        made = admin.create_topics([NewTopic(t, 3) for t in ("made", "more")], operation_timeout=15)
        for future in made.values():
            future.result(15)
        for topic, count, code in [
            ("made", 2, KafkaError.INVALID_PARTITIONS),
            ("made", 3, KafkaError.INVALID_PARTITIONS),
            ("made", 10_001, KafkaError.INVALID_PARTITIONS),
            ("events", 4, KafkaError.POLICY_VIOLATION),  # the config's topic
            ("nobody", 4, KafkaError.UNKNOWN_TOPIC_OR_PART),
        ]:
            assert refusal(grow(admin, topic, count)) == code, (topic, count)
        assert partition_count(admin, "made") == 3
        assert partition_count(admin, "events") == 2
        client = RawClient(bootstrap)
        try:
            body = {
                "topics": [
                    {"name": "made", "count": 4, "assignments": None},
                    {"name": "made", "count": 5, "assignments": None},
                    {"name": "more", "count": 4, "assignments": [{"broker_ids": [0]}]},
                ],
                "timeout": 10_000,
                "validate_only": False,
            }
            answer = client.call(CREATE_PARTITIONS, 3, body)
            assert [r.error_code for r in answer.results] == [ErrorCode.invalid_request] * 3
        finally:
            client.close()
        assert partition_count(admin, "made") == partition_count(admin, "more") == 3
        del admin


def test_growth_is_answered_by_its_timeout_and_goes_on(tmp_path: Path) -> None:
    """As CreateTopics: REQUEST_TIMED_OUT by the request's timeout while the new partitions
    open; a second growth asked meanwhile waits for the first, and the larger count wins."""
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        admin = AdminClient({"bootstrap.servers": bootstrap})
        [created] = admin.create_topics([NewTopic("made", 2)], operation_timeout=15).values()
        created.result(15)
        client = RawClient(bootstrap)
        try:

            def ask(count: int, timeout_ms: int) -> Any:
                body = {
                    "topics": [{"name": "made", "count": count, "assignments": None}],
                    "timeout": timeout_ms,
                    "validate_only": False,
                }
                return client.call(CREATE_PARTITIONS, 3, body).results[0]

            with held_open(server, "made") as release:
                first = ask(4, 200)
                assert first.error_code == ErrorCode.request_timed_out
                assert first.error_message
                assert ask(3, 0).error_code == ErrorCode.request_timed_out
                assert server.sink.topics.partitions["made"] == 2
                release.set()
                while server.sink.creation.creating("made"):
                    threading.Event().wait(0.01)
            assert server.sink.topics.partitions["made"] == 4
            assert partition_count(admin, "made") == 4
        finally:
            client.close()
            del admin


def test_a_user_grows_its_own_topics_only(tmp_path: Path) -> None:
    with listening(allowlisted(tmp_path)) as (_server, bootstrap):
        admin = limited_admin(bootstrap)
        assert refusal(grow(admin, "events", 4)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # app-logs is the config's: allowed, and refused for that.
        assert refusal(grow(admin, "app-logs", 4)) == KafkaError.POLICY_VIOLATION
        del admin


def test_a_configured_topic_grows_when_its_config_does_and_never_shrinks(tmp_path: Path) -> None:
    def config(partitions: int) -> Any:
        return api_config(tmp_path / "store", [{"name": "events", "partitions": partitions}])

    with listening(config(2)) as (_server, bootstrap):
        produce(bootstrap, "events", 10)
    with listening(config(4)) as (_server, bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert partition_count(admin, "events") == 4
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce("events", value=b"new", partition=3)
        assert producer.flush(30) == 0
        del admin, producer
    with listening(config(1)) as (_server, bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert partition_count(admin, "events") == 4  # producers that saw 4 still find 4
        del admin
    assert stored(tmp_path / "store", "events").num_rows == 11
