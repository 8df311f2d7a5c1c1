"""The journal across a crash and a restart under another config: what acks=all answered
from the journal before a kill -9 is in the store after the next start, once, whatever the
new config says of the Kafka API."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import KafkaError, Message, Producer

from bridge.config import parse_config
from bridge.local_kafka import free_port
from plateau_core import Store
from plateau_core.journal_files import JOURNAL_DIR, SUFFIX
from tests.bridge_support import serve_process, serve_stopped_at_once
from tests.reliability.test_produce_crashes import wait_listening


def config_of(data_dir: Path, port: int, topics: list[dict[str, Any]], **api: Any) -> str:
    return yaml.safe_dump(
        {
            "storage": {"data_dir": str(data_dir)},
            "kafka_api": {"listen": f"127.0.0.1:{port}", **api},
            "topics": topics,
            "shutdown_timeout": "20s",
        }
    )


def produce(port: int, topic: str, values: list[bytes]) -> list[int]:
    """acks=all to partition 0; the offsets the acknowledgements named."""
    offsets: list[int] = []
    failed: list[KafkaError] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(err)
        else:
            offset = msg.offset()
            assert offset is not None
            offsets.append(offset)

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all"})
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    assert failed == []
    return offsets


def journaled_then_killed(config: Path, port: int, topic: str, values: list[bytes]) -> None:
    """serve takes `values` (acks=all, answered from the journal; the topic's roll keeps
    them unsealed) and is killed before it seals them."""
    process = serve_process(config)
    try:
        wait_listening(port)
        assert produce(port, topic, values) == list(range(len(values)))
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    assert list((config.parent / "data" / JOURNAL_DIR).glob(f"*{SUFFIX}"))


def stopped(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    return err


def values_of(data_dir: Path, topic: str) -> list[tuple[int, bytes]]:
    with Store.open(data_dir) as store:
        rows = store.read(topic, columns=["offset", "value"]).to_table().to_pylist()
    return sorted((row["offset"], row["value"]) for row in rows)


def test_segment_durability_after_a_crash_replays_what_the_journal_acknowledged(
    tmp_path: Path,
) -> None:
    """durability switched from journal to segment between a crash and the restart: the
    records the journal acknowledged are sealed first, and new ones take the next offsets
    (they took the same offsets, the journaled records were lost, and switching back to
    the journal later stopped the start)."""
    port = free_port()
    data_dir = tmp_path / "data"
    config = tmp_path / "plateau.yaml"
    topics = [{"name": "events", "partitions": 1, "roll": {"max_age": "1h"}}]
    config.write_text(config_of(data_dir, port, topics))
    journaled_then_killed(config, port, "events", [b"a%d" % i for i in range(5)])

    config.write_text(config_of(data_dir, port, topics, durability="segment"))
    process = serve_process(config)
    try:
        wait_listening(port)
        assert produce(port, "events", [b"b0", b"b1"]) == [5, 6]
    finally:
        stopped(process)
    assert values_of(data_dir, "events") == [
        *((i, b"a%d" % i) for i in range(5)),
        (5, b"b0"),
        (6, b"b1"),
    ]
    assert not list((data_dir / JOURNAL_DIR).glob(f"*{SUFFIX}"))

    # And back to the journal: nothing is left to replay, the start goes through.
    config.write_text(config_of(data_dir, port, topics))
    process = serve_process(config)
    try:
        wait_listening(port)
        assert produce(port, "events", [b"c0"]) == [7]
    finally:
        stopped(process)
    assert values_of(data_dir, "events")[-1] == (7, b"c0")


def test_serve_without_the_kafka_api_says_the_journal_holds_unsealed_records(
    tmp_path: Path,
) -> None:
    """The kafka_api section removed between a crash and the restart: nothing replays the
    journal then (no writer owns the produced topics), so the start says so, rather than
    leaving acknowledged records unread without a word. They are replayed once the section
    is back."""
    port = free_port()
    data_dir = tmp_path / "data"
    config = tmp_path / "plateau.yaml"
    topics = [{"name": "events", "partitions": 1, "roll": {"max_age": "1h"}}]
    config.write_text(config_of(data_dir, port, topics))
    journaled_then_killed(config, port, "events", [b"a0", b"a1", b"a2"])

    consuming = parse_config(
        {
            "storage": {"data_dir": str(data_dir)},
            # Never reached: serve is stopped before it consumes.
            "kafka": {"bootstrap_servers": f"127.0.0.1:{free_port()}"},
            "topics": [{"name": "orders", "source": "orders"}],
            "metrics": {"enabled": False},
        }
    )
    code, logs = serve_stopped_at_once(consuming)
    assert code == 0
    warned = [e for e in logs if e["event"] == "journal_not_replayed"]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning"
    assert warned[0]["files"] == 1 and warned[0]["directory"] == str(data_dir / JOURNAL_DIR)
    assert list((data_dir / JOURNAL_DIR).glob(f"*{SUFFIX}"))

    process = serve_process(config)
    try:
        wait_listening(port)
    finally:
        stopped(process)
    assert values_of(data_dir, "events") == [(0, b"a0"), (1, b"a1"), (2, b"a2")]
