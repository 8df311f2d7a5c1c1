"""Poison records per on_error, regex mappings picking up new topics, check and status."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from bridge.consume.build import build_worker
from bridge.demo.producer import Record, produce
from bridge.errors import BridgeError
from bridge.ingest.records import ERROR_HEADERS
from bridge.local_kafka.topics import create_topic
from bridge.ops.check import check
from bridge.serve import EXIT_POISON, serve
from bridge.store import open_store
from plateau_core import Store
from tests.bridge_support import (
    committed,
    end_offsets,
    make_config,
    plateau_command,
    serving,
    stored,
    wait_landed,
)

GOOD = [json.dumps({"n": i}).encode() for i in range(10)]
BAD = {3: b"{not json", 7: b"\xff\xfe\x00garbage"}


def _records() -> list[Record]:
    return [
        Record(
            value=BAD.get(i, GOOD[i]),
            key=f"key-{i}".encode(),
            headers=(("origin", f"h{i}".encode()),),
            partition=0,
        )
        for i in range(10)
    ]


def _read_all(kafka: str, topic: str) -> list:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": f"read-{uuid.uuid4().hex}"})
    ends = end_offsets(kafka, topic)
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < sum(ends.values()) and time.monotonic() < deadline:
        out += [m for m in consumer.consume(100, timeout=1) if m.error() is None]
    consumer.close()
    return out


def test_poison_goes_to_the_dlq_with_original_bytes(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    dlq = topic_factory(partitions=1)
    produce(kafka, topic, _records())
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic, "format": "json", "on_error": "dlq", "dlq": dlq}],
        group=f"g-{topic}",
    )
    with serving(config):
        wait_landed(tmp_path, topic, {0: 9})  # offset 9 is good: the watermark passes 3 and 7
        deadline = time.monotonic() + 30
        while sum(end_offsets(kafka, dlq).values()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    assert sorted(stored(tmp_path, topic).column("n").to_pylist()) == [0, 1, 2, 4, 5, 6, 8, 9]
    letters = _read_all(kafka, dlq)
    assert [m.value() for m in letters] == [BAD[3], BAD[7]]
    assert [m.key() for m in letters] == [b"key-3", b"key-7"]
    for message, offset in zip(letters, (3, 7), strict=True):
        headers = dict(message.headers())
        assert headers["origin"] == f"h{offset}".encode()
        assert headers[ERROR_HEADERS[0]] == topic.encode()
        assert headers[ERROR_HEADERS[1]] == b"0"
        assert headers[ERROR_HEADERS[2]] == str(offset).encode()
        assert headers[ERROR_HEADERS[3]]


def test_poison_is_skipped_and_logged(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = topic_factory(partitions=1)
    produce(kafka, topic, _records())
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic, "format": "json", "on_error": "skip"}],
        group=f"g-{topic}",
    )
    with serving(config):
        wait_landed(tmp_path, topic, {0: 10})
    assert sorted(stored(tmp_path, topic).column("n").to_pylist()) == [0, 1, 2, 4, 5, 6, 8, 9]
    assert capsys.readouterr().out.count("record_skipped") == 2


def test_poison_stops_the_worker_before_it(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    produce(kafka, topic, _records())
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic, "format": "json", "on_error": "fail"}],
        group=f"g-{topic}",
    )
    assert serve(config, 1) == EXIT_POISON
    table = stored(tmp_path, topic)
    # Everything before the poison record landed; nothing after it did.
    assert table.column("n").to_pylist() == [0, 1, 2]
    with Store.open(tmp_path) as store:
        assert store.manifest.watermark(topic, 0) == 3


def test_a_dead_letter_topic_that_refuses_keeps_the_watermark_before_the_poison(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """The dead-letter topic refuses the poison record (too large for it): the worker stops
    naming it, and nothing after it was sealed, so the record is read again next time
    rather than lost between the store and the dead-letter topic."""
    topic = topic_factory(partitions=1)
    dlq = topic_factory(partitions=1, **{"max.message.bytes": "2000"})
    poison = b"\xff" * 20_000
    produce(
        kafka,
        topic,
        [Record(value=poison if i == 5 else GOOD[i], partition=0) for i in range(10)],
    )
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic, "format": "json", "on_error": "dlq", "dlq": dlq}],
        group=f"g-{topic}",
    )
    with open_store(config) as store:
        with pytest.raises(BridgeError, match="dead"):
            build_worker(config, store, threading.Event()).run()
        assert (store.manifest.watermark(topic, 0) or 0) <= 5
    assert sorted(stored(tmp_path, topic).column("n").to_pylist()) == [0, 1, 2, 3, 4]
    assert sum(end_offsets(kafka, dlq).values()) == 0


def test_regex_mapping_picks_up_a_topic_created_later(kafka: str, tmp_path: Path) -> None:
    prefix = f"feed-{uuid.uuid4().hex[:8]}"
    early = f"{prefix}-a"
    create_topic(kafka, early, 1)
    config = make_config(
        kafka,
        tmp_path,
        [{"source": f"regex:{prefix}-.*", "name": "landed-{source}"}],
        group=f"g-{prefix}",
        kafka_extra={"topic.metadata.refresh.interval.ms": 1000},
    )
    produce(kafka, early, [Record(value=b"early")])
    with serving(config):
        wait_landed(tmp_path, f"landed-{early}", {0: 1})
        late = f"{prefix}-b"
        create_topic(kafka, late, 2)
        produce(kafka, late, [Record(value=f"late{i}".encode()) for i in range(20)])
        wait_landed(tmp_path, f"landed-{late}", end_offsets(kafka, late), timeout_s=60)
    assert stored(tmp_path, f"landed-{late}").num_rows == 20


def test_check_and_status_commands(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    produce(kafka, topic, (Record(value=b"v", partition=i % 2) for i in range(100)))
    config_file = tmp_path / "plateau.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": kafka, "group_id": f"g-{topic}"},
                "storage": {"data_dir": "data"},
                "defaults": {"roll": {"max_age": "200ms"}},
                "topics": [{"source": topic}],
            }
        )
    )
    checked = plateau_command("check", "--config", str(config_file))
    assert checked.returncode == 0, checked.stderr
    assert f"topic {topic}: found {topic}" in checked.stdout

    config = make_config(kafka, tmp_path / "data", [{"source": topic}], group=f"g-{topic}")
    with serving(config):
        wait_landed(tmp_path / "data", topic, end_offsets(kafka, topic))
    status = plateau_command("status", "--config", str(config_file), "--json")
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    partitions = document["topics"][topic]["partitions"]
    assert set(partitions) == {"0", "1"}
    for row in partitions.values():
        assert row["next_offset"] == row["end_offset"] == row["committed_offset"] == 50
        assert row["lag"] == 0
        assert row["records"] == 50
        assert row["segments"] >= 1
        assert row["time_min"].endswith("+00:00")
        assert row["paused"] is None
    table = plateau_command("status", "--config", str(config_file))
    assert table.returncode == 0
    assert topic in table.stdout


def test_check_fails_when_brokers_do_not_answer(tmp_path: Path) -> None:
    config_file = tmp_path / "plateau.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": "127.0.0.1:1", "socket.timeout.ms": 1000},
                "storage": {"data_dir": str(tmp_path / "data")},
                "topics": [{"source": "anything"}],
            }
        )
    )
    checked = plateau_command("check", "--config", str(config_file), "--timeout", "1500ms")
    assert checked.returncode != 0
    assert "no answer from 127.0.0.1:1 within 1.5s" in checked.stderr


def test_trailing_poison_moves_the_watermark_and_is_not_read_again(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = topic_factory(partitions=1)
    produce(kafka, topic, [Record(value=GOOD[0], partition=0), Record(value=BAD[3], partition=0)])
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic, "format": "json", "on_error": "skip"}],
        group=f"g-{topic}",
    )
    with serving(config):
        wait_landed(tmp_path, topic, {0: 2})  # the watermark passes the trailing poison record
    assert committed(kafka, f"g-{topic}", topic, 1) == {0: 2}
    with serving(config):
        # A record after the poison one: once it lands, the restarted worker has read past
        # the poison's offset, and would have skipped it a second time had it read it again.
        produce(kafka, topic, [Record(value=GOOD[2], partition=0)])
        wait_landed(tmp_path, topic, {0: 3})
    assert capsys.readouterr().out.count("record_skipped") == 1
    assert stored(tmp_path, topic).column("n").to_pylist() == [0, 2]


def test_check_says_whether_the_dead_letter_topic_exists(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    # The test broker, as most clusters should, does not create topics on first use: a
    # dead letter to a topic that is missing stops the worker.
    topic = topic_factory(partitions=1)
    dlq = f"{topic}-dlq"
    config = make_config(
        kafka,
        tmp_path / "data",
        [{"source": topic, "format": "json", "on_error": "dlq", "dlq": dlq}],
        group=f"g-{topic}",
    )
    assert f"dead-letter topic {dlq}: not found: create it" in "\n".join(check(config))
    create_topic(kafka, dlq, 1)
    assert f"dead-letter topic {dlq}: found" in check(config)
