"""The protocol spoken by hand, for what real clients rarely send on purpose: idempotent
batches sent again (also across a restart), sequence gaps, fenced epochs, and bad input,
each answered as Kafka would while other connections carry on."""

from __future__ import annotations

import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import crc32c
import pytest
from kio.schema.errors import ErrorCode
from structlog.testing import capture_logs

from bridge.kafka_api.partition import Outcome, Pending
from plateau_core import Append, Store
from tests.kafka_api.raw_batches import batch_of, varint
from tests.kafka_api.support import (
    RawClient,
    api_config,
    listening,
    produce_body,
    record_batch,
    stored,
)

PRODUCE, METADATA, API_VERSIONS, INIT_PRODUCER_ID = 0, 3, 18, 22


def partition_answer(response: Any) -> Any:
    return response.responses[0].partition_responses[0]


def produce(client: RawClient, topic: str, records: bytes, partition: int = 0) -> Any:
    return partition_answer(client.call(PRODUCE, 9, produce_body(topic, partition, records)))


def still_serving(bootstrap: str) -> None:
    """Another connection gets answers: one client's bad input ends only its connection."""
    other = RawClient(bootstrap)
    try:
        versions = other.call(API_VERSIONS, 3, {"client_software_name": "t"})
        assert versions.error_code == ErrorCode.none
        answer = produce(other, "events", record_batch([b"fine"]))
        assert answer.error_code == ErrorCode.none
    finally:
        other.close()


def producer_id(client: RawClient) -> int:
    answer = client.call(
        INIT_PRODUCER_ID,
        4,
        {"transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1},
    )
    assert answer.error_code == ErrorCode.none
    return int(answer.producer_id)


def test_a_batch_sent_again_is_answered_with_its_offsets_even_after_a_restart(
    tmp_path: Path,
) -> None:
    config = api_config(tmp_path / "store")
    first = [b"a", b"b", b"c"]
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        pid = producer_id(client)
        assert producer_id(client) != pid  # never the same id twice
        # Naming an id does not get it back (Kafka's rule without a transactional id).
        named = client.call(
            INIT_PRODUCER_ID,
            4,
            {"transaction_timeout": 60_000, "producer_id": pid, "producer_epoch": 0},
        )
        assert named.producer_id not in (pid, pid + 1)
        assert named.producer_epoch == 0
        produce(client, "events", record_batch([b"other"]))  # offset 0 belongs to someone else
        batch = record_batch(first, producer_id=pid, epoch=0, sequence=0)
        landed = produce(client, "events", batch)
        again = produce(client, "events", batch)
        assert landed.error_code == again.error_code == ErrorCode.none
        assert again.base_offset == landed.base_offset == 1
        # A gap in the sequence is refused, and so is an older epoch after a newer one.
        gap = produce(client, "events", record_batch([b"x"], producer_id=pid, epoch=0, sequence=5))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        newer = record_batch([b"d"], producer_id=pid, epoch=1, sequence=0)
        assert produce(client, "events", newer).error_code == ErrorCode.none
        older = record_batch([b"y"], producer_id=pid, epoch=0, sequence=3)
        assert produce(client, "events", older).error_code == ErrorCode.invalid_producer_epoch
        client.close()
    # The producer's batches were recorded with their segments: a retry after a restart is
    # recognised too.
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        retried = produce(
            client, "events", record_batch([b"d"], producer_id=pid, epoch=1, sequence=0)
        )
        assert retried.error_code == ErrorCode.none
        assert retried.base_offset == 4
        client.close()
    values = stored(tmp_path / "store", "events").column("value").to_pylist()
    assert sorted(v for v in values if v in (b"a", b"b", b"c", b"d")) == [b"a", b"b", b"c", b"d"]
    assert len(values) == 5


def test_api_versions_it_does_not_know_are_answered_in_v0(tmp_path: Path) -> None:
    """How a newer client learns the versions (franz-go asks v5 on every connection): not
    an error, so neither a warning nor a count in plateau_kafka_api_errors_total."""
    with listening(api_config(tmp_path / "store")) as (server, bootstrap):
        client = RawClient(bootstrap)
        frame = struct.pack(">hhi", API_VERSIONS, 99, 7) + struct.pack(">h", -1) + b"\0" * 4
        with capture_logs() as logs:
            client.send_frame(frame)
            body = client.read_frame()
        assert [e for e in logs if e["log_level"] == "warning"] == []
        assert server.stats.errors == {}
        correlation, error = struct.unpack_from(">ih", body)
        assert (correlation, error) == (7, ErrorCode.unsupported_version)
        (count,) = struct.unpack_from(">i", body, 6)
        keys = {struct.unpack_from(">hhh", body, 10 + 6 * i)[0] for i in range(count)}
        assert {PRODUCE, METADATA, API_VERSIONS, INIT_PRODUCER_ID} <= keys
        client.close()
        still_serving(bootstrap)


def test_other_versions_it_does_not_know_are_errors(tmp_path: Path) -> None:
    """Unlike ApiVersions, a Produce v2 (below the range) is a client plateau cannot serve:
    warned of, counted, and its connection closed (Produce has no top-level error code)."""
    with listening(api_config(tmp_path / "store")) as (server, bootstrap):
        client = RawClient(bootstrap)
        frame = struct.pack(">hhi", PRODUCE, 2, 7) + struct.pack(">h", -1) + b"\0" * 10
        with capture_logs() as logs:
            client.send_frame(frame)
            assert client.closed_by_peer()
        assert [e["error"] for e in logs if e["event"] == "kafka_request_unsupported"] == [
            "Produce v2 is not supported"
        ]
        assert server.stats.errors == {("Produce", "unsupported_version"): 1}
        client.close()
        still_serving(bootstrap)


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">hhi", 9999, 0, 1) + struct.pack(">h", -1),  # an API nobody has
        struct.pack(">hhi", PRODUCE, 2, 1) + struct.pack(">h", -1),  # Produce v2
        struct.pack(">hhi", METADATA, 99, 1) + struct.pack(">h", -1),
        b"\0\0\0",  # shorter than a header
    ],
    ids=["unknown-api", "produce-v2", "metadata-v99", "short"],
)
def test_unreadable_requests_close_only_their_connection(tmp_path: Path, frame: bytes) -> None:
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        client = RawClient(bootstrap)
        client.send_frame(frame)
        assert client.closed_by_peer()
        client.close()
        still_serving(bootstrap)


@pytest.mark.parametrize(
    ("api_key", "version", "body", "null"),
    [
        (2, 7, {"replica_id": -1, "isolation_level": 0, "topics": None}, "topics"),
        (
            2,
            7,
            {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "e", "partitions": None}]},
            "topics.partitions",
        ),
        (19, 7, {"topics": None, "timeout": 1000, "validate_only": False}, "topics"),
        (32, 4, {"resources": None}, "resources"),
    ],
    ids=["list-offsets", "list-offsets-nested", "create-topics", "describe-configs"],
)
def test_a_null_array_where_kafka_has_none_closes_the_connection(
    tmp_path: Path, api_key: int, version: int, body: dict[str, Any], null: str
) -> None:
    """kio reads an array's length of -1 as None even where the schema has no null; Kafka
    refuses such a request, and so does plateau, saying which array it was."""
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        client = RawClient(bootstrap)
        with capture_logs() as logs:
            client.send_frame(client.request_frame(api_key, version, body))
            assert client.closed_by_peer()
        client.close()
        closed = [e for e in logs if e["event"] == "kafka_connection_closed"]
        assert closed and closed[0]["reason"].endswith(f"carries a null {null}"), logs
        assert not [e for e in logs if e["log_level"] == "error"], logs
        still_serving(bootstrap)


@pytest.mark.parametrize("size", [-5, 200 * 1024 * 1024])
def test_impossible_frame_sizes_close_the_connection(tmp_path: Path, size: int) -> None:
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        client = RawClient(bootstrap)
        client.sock.sendall(struct.pack(">i", size) + b"\0" * 16)
        assert client.closed_by_peer()
        client.close()
        still_serving(bootstrap)


def test_bytes_after_a_request_are_left_alone_as_kafka_does(tmp_path: Path) -> None:
    """librdkafka's Metadata v12 (AdminClient.list_topics) ends in three bytes after the
    request; Kafka's parser ignores them, and so does plateau."""
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        client = RawClient(bootstrap)
        good = client.request_frame(API_VERSIONS, 3, {"client_software_name": "t"})
        client.send_frame(good + b"junk")
        assert client.response(API_VERSIONS, 3).error_code == ErrorCode.none
        client.close()


def corrupt(batch: bytes) -> bytes:
    broken = bytearray(batch)
    broken[-1] ^= 0xFF  # inside the last record, covered by the CRC
    return bytes(broken)


def legacy_message_set() -> bytes:
    """One message in format v1 (magic 1), as producers before Kafka 0.11 sent it."""
    message = struct.pack(">bbq", 1, 0, 0) + struct.pack(">i", -1) + struct.pack(">i", 1) + b"x"
    crc = 0  # the broker refuses it by its magic before looking at the CRC
    body = struct.pack(">I", crc) + message
    return struct.pack(">qi", 0, len(body)) + body


def recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def no_records() -> bytes:
    """A batch header saying it holds nothing (last offset delta -1, count 0)."""
    batch = bytearray(record_batch([b"x"]))[:61]
    struct.pack_into(">i", batch, 8, 61 - 12)
    struct.pack_into(">i", batch, 23, -1)
    struct.pack_into(">i", batch, 57, 0)
    return recrc(batch)


def sequence_less() -> bytes:
    """An idempotent producer's batch with base sequence -1."""
    batch = bytearray(record_batch([b"x"], producer_id=999, epoch=0, sequence=0))
    struct.pack_into(">i", batch, 53, -1)
    return recrc(batch)


@pytest.mark.parametrize(
    ("records", "error"),
    [
        (corrupt(record_batch([b"a", b"b"])), ErrorCode.corrupt_message),
        (record_batch([b"a", b"b"])[:-7], ErrorCode.corrupt_message),
        (legacy_message_set(), ErrorCode.invalid_record),
        (record_batch([b"v" * 2000]), ErrorCode.message_too_large),
        (record_batch([b"a"]) + record_batch([b"b"]), ErrorCode.invalid_record),
        (b"", ErrorCode.invalid_record),
        (no_records(), ErrorCode.invalid_record),
        (sequence_less(), ErrorCode.invalid_record),
    ],
    ids=[
        "bad-crc",
        "truncated",
        "magic-1",
        "too-large",
        "two-batches",
        "no-batch",
        "no-records",
        "idempotent-without-sequence",
    ],
)
def test_bad_batches_get_kafkas_answer_and_store_nothing(
    tmp_path: Path, records: bytes, error: ErrorCode
) -> None:
    config = api_config(tmp_path / "store", message_max_bytes="1KiB")
    with listening(config) as (server, bootstrap):
        client = RawClient(bootstrap)
        answer = produce(client, "events", records)
        assert answer.error_code == error
        assert answer.error_message
        assert server.stats.records["events"] == 0
        # The connection carries on after a refused batch.
        assert produce(client, "events", record_batch([b"ok"])).error_code == ErrorCode.none
        client.close()
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"ok"]


def one_record(body: bytes, claimed: int | None = None) -> bytes:
    """A batch of one record with this body after its length (`claimed`, when the length
    says another size), CRC right: a crafted batch, not a damaged one."""
    return batch_of(varint(len(body) if claimed is None else claimed) + body, 1)


@pytest.mark.parametrize(
    ("records", "named"),
    [
        # attributes, timestamp delta, offset delta, then a key length whose varint's
        # continuation bit points past the end of the batch
        (one_record(b"\x00\x02\x00\xd0", claimed=10), "the key length runs past the end"),
        # a null key and value, then a header count no bytes are left for
        (one_record(b"\x00\x00\x00\x01\x01" + varint(1000)), "1000 headers, with 0 bytes left"),
        (one_record(b"\x00\x00\x00\x01\x01\x02" + varint(40) + b"ab"), "header key claims 40"),
    ],
    ids=["truncated-varint", "more-headers-than-bytes", "header-key-past-the-end"],
)
def test_crafted_records_are_refused_as_corrupt_naming_what_does_not_read(
    tmp_path: Path, records: bytes, named: str
) -> None:
    """Records that read past the batch's end, with a CRC that matches (it is no
    authentication): refused by the bounds-checked reader, which says where."""
    with listening(api_config(tmp_path / "store")) as (server, bootstrap):
        client = RawClient(bootstrap)
        answer = produce(client, "events", records)
        assert answer.error_code == ErrorCode.corrupt_message
        assert named in answer.error_message
        assert "record 0" in answer.error_message
        assert server.stats.records["events"] == 0
        assert produce(client, "events", record_batch([b"ok"])).error_code == ErrorCode.none
        client.close()
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"ok"]


def test_a_batch_sent_again_to_a_log_append_time_topic_gets_its_append_time(
    tmp_path: Path,
) -> None:
    config = api_config(
        tmp_path / "store", [{"name": "lat", "partitions": 1, "timestamp": "log_append_time"}]
    )
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        batch = record_batch([b"a"], producer_id=producer_id(client), epoch=0, sequence=0)
        first = produce(client, "lat", batch)
        time.sleep(0.01)
        again = produce(client, "lat", batch)
        client.close()
    assert first.log_append_time is not None
    assert (again.base_offset, again.log_append_time) == (0, first.log_append_time)


def test_acks_kafka_does_not_know_are_refused_and_nothing_lands(tmp_path: Path) -> None:
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        client = RawClient(bootstrap)
        body = produce_body("events", 0, record_batch([b"a"]), acks=2)
        body["topic_data"][0]["partition_data"].append(
            {"index": 1, "records": record_batch([b"b"])}
        )
        answer = client.call(PRODUCE, 9, body)
        codes = [p.error_code for p in answer.responses[0].partition_responses]
        assert codes == [ErrorCode.invalid_required_acks] * 2
        client.close()
    assert stored(tmp_path / "store", "events").num_rows == 0


def test_a_refused_acks_0_produce_closes_its_connection(tmp_path: Path) -> None:
    """A producer that hears nothing learns of the refusal as Kafka tells it: the
    connection closes, and it asks for metadata again."""
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        client = RawClient(bootstrap)
        client.send_frame(
            client.request_frame(PRODUCE, 9, produce_body("nope", 0, record_batch([b"a"]), 0))
        )
        assert client.closed_by_peer()
        client.close()
        still_serving(bootstrap)


def test_topics_a_regex_source_consumes_are_not_created_here(tmp_path: Path) -> None:
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 1}, {"source": "regex:clicks-.*"}],
        auto_create_topics=True,
    )
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        answer = produce(client, "clicks-eu", record_batch([b"a"]))
        assert answer.error_code == ErrorCode.invalid_topic_exception
        assert "consumed from the Kafka cluster" in answer.error_message
        assert produce(client, "other", record_batch([b"b"])).error_code == ErrorCode.none
        client.close()


def test_unknown_topics_and_partitions(tmp_path: Path) -> None:
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        client = RawClient(bootstrap)
        batch = record_batch([b"a"])
        assert produce(client, "nope", batch).error_code == ErrorCode.unknown_topic_or_partition
        assert (
            produce(client, "events", batch, partition=7).error_code
            == ErrorCode.unknown_topic_or_partition
        )
        metadata = client.call(
            METADATA,
            12,
            {
                "topics": [{"name": "nope"}, {"name": "events"}],
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            },
        )
        by_name = {t.name: t for t in metadata.topics}
        assert by_name["nope"].error_code == ErrorCode.unknown_topic_or_partition
        assert len(by_name["events"].partitions) == 2
        assert [b.port for b in metadata.brokers] == [int(bootstrap.rsplit(":", 1)[1])]
        client.close()


def test_metadata_by_topic_id_answers_an_unknown_id_as_kafka_does(tmp_path: Path) -> None:
    """Metadata v12 names topics by id: a known id gets its topic, an unknown one
    UNKNOWN_TOPIC_ID with no name, and nothing is created for it. It was answered as a
    topic named "", and with auto_create_topics, INVALID_TOPIC_EXCEPTION."""
    config = api_config(tmp_path / "store", auto_create_topics=True)
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        client = RawClient(bootstrap)
        listed = client.call(
            METADATA,
            12,
            {
                "topics": [{"name": "events"}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        known = listed.topics[0].topic_id
        unknown = uuid.uuid4()
        by_id = client.call(
            METADATA,
            12,
            {
                "topics": [
                    {"topic_id": unknown, "name": None},
                    {"topic_id": known, "name": None},
                    # Neither name nor id: the connection closed on an assertion.
                    {"topic_id": uuid.UUID(int=0), "name": None},
                ],
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            },
        )
        client.close()
        topics = server.sink.topics.partitions
    answered = [(t.name, t.topic_id, t.error_code, len(t.partitions)) for t in by_id.topics]
    assert answered == [
        (None, unknown, ErrorCode.unknown_topic_id, 0),
        ("events", known, ErrorCode.none, 2),
        (None, None, ErrorCode.unknown_topic_id, 0),
    ]
    assert sorted(topics) == ["events"]


def test_undecodable_records_per_on_error(tmp_path: Path) -> None:
    config = api_config(
        tmp_path / "store",
        [
            {"name": "strict", "partitions": 1, "format": "json"},
            {
                "name": "lenient",
                "partitions": 1,
                "format": "json",
                "on_error": "dlq",
                "dlq": "lenient-dlq",
            },
        ],
    )
    values = [b'{"n": 1}', b"not json", b'{"n": 3}']
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        refused = produce(client, "strict", record_batch(values))
        assert refused.error_code == ErrorCode.invalid_record
        assert [e.batch_index for e in refused.record_errors] == [1]
        taken = produce(client, "lenient", record_batch(values))
        assert taken.error_code == ErrorCode.none
        client.close()
    assert stored(tmp_path / "store", "strict").num_rows == 0
    assert stored(tmp_path / "store", "lenient").column("n").to_pylist() == [1, 3]
    letters = stored(tmp_path / "store", "lenient-dlq").to_pylist()
    assert [r["value"] for r in letters] == [b"not json"]
    headers = {h["key"]: h["value"] for h in letters[0]["headers"]}
    assert headers["plateau.error.topic"] == b"lenient"
    assert headers["plateau.error.offset"] == b"1"


def test_a_request_lands_as_one_journal_group_with_its_dead_letters_in_order(
    tmp_path: Path,
) -> None:
    """Every partition of a request goes to the writer as one group (one journal write);
    dead letters of one batch take consecutive offsets in their dead-letter partition, each
    naming the offset it came from."""
    config = api_config(
        tmp_path / "store",
        [
            {"name": "events", "partitions": 3},
            {
                "name": "lenient",
                "partitions": 1,
                "format": "json",
                "on_error": "dlq",
                "dlq": "lenient-dlq",
            },
        ],
    )
    body = {
        "acks": -1,
        "timeout": 10_000,
        "topic_data": [
            {
                "name": "events",
                "partition_data": [
                    {"index": p, "records": record_batch([b"e%d" % p] * 2)} for p in range(3)
                ],
            },
            {
                "name": "lenient",
                "partition_data": [
                    {
                        "index": 0,
                        "records": record_batch([b'{"n": 0}', b"bad a", b"bad b", b'{"n": 3}']),
                    }
                ],
            },
        ],
    }
    with listening(config) as (server, bootstrap):
        assert server.sink is not None and server.sink.writer.journal is not None
        journal = server.sink.writer.journal
        before = journal.next_seq
        client = RawClient(bootstrap)
        response = client.call(PRODUCE, 9, body)
        client.close()
        assert journal.next_seq == before + 1
    answers = [p for t in response.responses for p in t.partition_responses]
    assert [(a.error_code, a.base_offset) for a in answers] == [(ErrorCode.none, 0)] * 4
    events = stored(tmp_path / "store", "events").column("value").to_pylist()
    assert sorted(events) == [b"e0", b"e0", b"e1", b"e1", b"e2", b"e2"]
    assert stored(tmp_path / "store", "lenient").column("n").to_pylist() == [0, 3]
    letters = stored(tmp_path / "store", "lenient-dlq").to_pylist()
    assert [(r["offset"], r["value"]) for r in letters] == [(0, b"bad a"), (1, b"bad b")]
    came_from = [
        {h["key"]: h["value"] for h in r["headers"]}["plateau.error.offset"] for r in letters
    ]
    assert came_from == [b"1", b"2"]


def test_the_journal_limit_is_the_memory_budget_unless_set(tmp_path: Path) -> None:
    for name, extra, expected in (
        ("default", {}, 512 * 1024 * 1024),
        ("set", {"journal_max_bytes": "64MiB"}, 64 * 1024 * 1024),
    ):
        with listening(api_config(tmp_path / name, **extra)) as (server, _):
            assert server.sink is not None
            assert server.sink.writer.policy.journal_max_bytes == expected


def test_a_producer_silent_for_the_expiry_is_forgotten_as_kafka_forgets_it(
    tmp_path: Path,
) -> None:
    """Every restart of a Java producer takes a new id: without an expiry their states would
    pile up in the manifest and in memory. One silent for producer_expiry is forgotten, and
    its retry is then taken as new (Kafka's producer.id.expiration.ms)."""
    config = api_config(tmp_path / "store", producer_expiry="1m")
    batch = record_batch([b"a"], producer_id=7, epoch=0, sequence=0)
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        client = RawClient(bootstrap)
        assert produce(client, "events", batch).base_offset == 0
        assert produce(client, "events", batch).base_offset == 0  # a retry: its offsets
        state = server.sink.partitions[("events", 0)]
        assert server.sink.expire_producers() == 0
        state.seen[7] -= 61  # a minute of silence
        assert server.sink.expire_producers() == 1
        assert produce(client, "events", batch).base_offset == 1  # new to the store now
        client.close()
    with Store.open(tmp_path / "store") as store:
        assert set(store.manifest.producer_states("events", 0)) == {7}
        assert store.manifest.expire_producers(int(time.time() * 1000) + 1) == 1
        assert store.manifest.producer_states("events", 0) == {}


def test_an_idempotent_batch_of_only_poison_keeps_the_sequence_across_a_restart(
    tmp_path: Path,
) -> None:
    """A skipped batch lands no rows, yet its sequence numbers are recorded (with the
    watermark move over it), so the producer's next batch is in order after a restart."""
    config = api_config(
        tmp_path / "store", [{"name": "j", "partitions": 1, "format": "json", "on_error": "skip"}]
    )
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        pid = producer_id(client)
        good = produce(
            client, "j", record_batch([b'{"n": 1}'], producer_id=pid, epoch=0, sequence=0)
        )
        bad = record_batch([b"not json", b"nor this"], producer_id=pid, epoch=0, sequence=1)
        skipped = produce(client, "j", bad)
        assert (good.error_code, skipped.error_code) == (ErrorCode.none, ErrorCode.none)
        assert skipped.base_offset == 1
        client.close()
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        again = produce(client, "j", bad)  # a retry of the skipped batch: still a duplicate
        assert (again.error_code, again.base_offset) == (ErrorCode.none, 1)
        following = record_batch([b'{"n": 4}'], producer_id=pid, epoch=0, sequence=3)
        answer = produce(client, "j", following)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 3)
        client.close()
    with Store.open(tmp_path / "store") as store:
        assert store.manifest.watermark("j", 0) == 4
        assert store.read("j").to_table().column("n").to_pylist() == [1, 4]


@pytest.mark.parametrize("durability", ["journal", "segment"])
def test_a_write_slower_than_the_request_timeout_is_answered_request_timed_out(
    tmp_path: Path, durability: str
) -> None:
    """acks=all waits for the journal's sync (or the seal) at most the request's timeout;
    the records still land, and the partition goes on handing out offsets after them."""
    config = api_config(tmp_path / "store", durability=durability)
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        writer = server.sink.writer
        released = threading.Event()
        if durability == "segment":
            real = writer._write_segment

            def held(*args: Any, **kwargs: Any) -> Any:
                released.wait(30)
                return real(*args, **kwargs)

            writer._write_segment = held
        else:
            assert writer.journal is not None
            flush = writer.journal._flush

            def held_flush(*args: Any, **kwargs: Any) -> Any:
                released.wait(30)
                return flush(*args, **kwargs)

            writer.journal._flush = held_flush  # type: ignore[method-assign]
        client = RawClient(bootstrap)
        body = produce_body("events", 0, record_batch([b"a", b"b"]))
        body["timeout"] = 300
        body["topic_data"][0]["partition_data"].append(
            {"index": 1, "records": record_batch([b"c"])}
        )
        answer = client.call(PRODUCE, 9, body)
        codes = [p.error_code for p in answer.responses[0].partition_responses]
        assert codes == [ErrorCode.request_timed_out, ErrorCode.request_timed_out]
        released.set()
        later = produce(client, "events", record_batch([b"d"]))
        assert (later.error_code, later.base_offset) == (ErrorCode.none, 2)
        client.close()
    table = stored(tmp_path / "store", "events")
    assert sorted(table.column("value").to_pylist()) == [b"a", b"b", b"c", b"d"]


def test_a_partition_held_back_is_answered_when_durable_not_when_the_first_one_is(
    tmp_path: Path,
) -> None:
    """The first partition of a request becomes durable while the second waits for the
    writer: the second is still answered by its own durability (not REQUEST_TIMED_OUT
    long before the timeout, which a producer without idempotence would send again)."""
    config = api_config(tmp_path / "store")
    with listening(config) as (server, bootstrap):
        assert server.sink is not None
        writer = server.sink.writer
        accepting = writer.accepting
        refusals: list[float] = []  # when partition 1 was refused, the first one opening

        def held_back(topic: str, partition: int) -> bool:
            # Half a second from the first look at partition 1, however late the request
            # arrives: partition 0 is durable long before that.
            if partition == 1 and (not refusals or time.monotonic() < refusals[0] + 0.5):
                refusals.append(time.monotonic())
                return False
            return accepting(topic, partition)

        writer.accepting = held_back  # type: ignore[method-assign]
        client = RawClient(bootstrap)
        body = produce_body("events", 0, record_batch([b"p0"]))
        body["topic_data"][0]["partition_data"].append(
            {"index": 1, "records": record_batch([b"p1"])}
        )
        answer = client.call(PRODUCE, 9, body)
        client.close()
    assert refusals, "partition 1 was never held back"
    codes = [(p.index, p.error_code) for p in answer.responses[0].partition_responses]
    assert codes == [(0, ErrorCode.none), (1, ErrorCode.none)]
    table = stored(tmp_path / "store", "events")
    assert sorted(table.column("value").to_pylist()) == [b"p0", b"p1"]


def test_records_not_durable_when_their_partition_is_let_go_are_not_acknowledged(
    tmp_path: Path,
) -> None:
    """A partition let go while an acks=all request waits for its sync (the listener
    stopping) answers NOT_LEADER_OR_FOLLOWER: unacknowledged, so the producer sends the
    records again."""
    with listening(api_config(tmp_path / "store")) as (server, bootstrap):
        sink = server.sink
        assert sink is not None and sink.writer.journal is not None
        journal = sink.writer.journal
        released = threading.Event()
        flush = journal._flush

        def held_flush(*args: Any, **kwargs: Any) -> Any:
            released.wait(30)
            return flush(*args, **kwargs)

        journal._flush = held_flush  # type: ignore[method-assign]
        state = sink.partitions[("events", 0)]

        def let_go_once_waiting() -> None:
            deadline = time.monotonic() + 10
            while not state.waiting() and time.monotonic() < deadline:
                time.sleep(0.01)
            stopping = ConnectionAbortedError("the listener is stopping")
            sink.loop.call_soon_threadsafe(state.fail_waiters, stopping)

        letting_go = threading.Thread(target=let_go_once_waiting)
        letting_go.start()
        client = RawClient(bootstrap)
        answer = client.call(PRODUCE, 9, produce_body("events", 0, record_batch([b"a"])))
        released.set()
        letting_go.join()
        client.close()
    (part,) = answer.responses[0].partition_responses
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert part.error_message == "the listener is stopping"


def test_a_batch_still_stalled_when_the_listener_stops_is_left_to_its_producer(
    tmp_path: Path,
) -> None:
    """A seal that finishes after the listener stopped reports capacity; batches the writer
    never took (never acknowledged) are not retried against the closed writer."""
    with listening(api_config(tmp_path / "store")) as (server, _bootstrap):
        sink = server.sink
        assert sink is not None
        state = sink.partitions[("events", 0)]
    state.stalled.append(Pending(Append("events", 0, advance_to=5), 0, Outcome()))
    sink._capacity_freed()
    assert len(state.stalled) == 1


def test_a_producer_id_waiting_for_the_manifest_holds_up_no_other_connection(
    tmp_path: Path,
) -> None:
    """InitProducerId writes the manifest's counter, which waits behind any other write (a
    seal's commit, a consolidation, expiring producers, another process's lock on SQLite,
    a PostgreSQL server that does not answer). Written on the event loop, that wait stalled
    every connection: no answer, no acks=all acknowledgement, for as long as it lasted."""
    with listening(api_config(tmp_path / "store")) as (server, bootstrap):
        assert server.sink is not None
        manifest: Any = server.sink.store.manifest
        starting, other = RawClient(bootstrap), RawClient(bootstrap)
        with manifest._write_lock:  # a long write of the manifest
            starting.send_frame(
                starting.request_frame(
                    INIT_PRODUCER_ID,
                    4,
                    {"transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1},
                )
            )
            answer = produce(other, "events", record_batch([b"meanwhile"]))
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
        assigned = starting.response(INIT_PRODUCER_ID, 4)
        assert (assigned.error_code, assigned.producer_epoch) == (ErrorCode.none, 0)
        assert assigned.producer_id >= 0
        starting.close()
        other.close()
