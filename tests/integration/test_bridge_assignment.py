"""A partition whose assignment cannot be set up (its lock still held, Kafka or the manifest
not answering) waits, paused, and is set up again; the worker and its other partitions go on."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from structlog.testing import capture_logs

import bridge.consume.assignment as assignment_module
from bridge.config.models import Config
from bridge.consume.build import build_worker
from bridge.consume.worker import Worker
from bridge.demo.producer import Record, produce
from bridge.ops.worker_status import read_status_files
from bridge.store import open_store
from plateau_core import Store
from plateau_core.names import partition_dir
from plateau_core.partition_lock import PartitionLock
from tests.bridge_support import (
    end_offsets,
    make_config,
    serve_process,
    stored,
    wait_landed,
    write_config_file,
)


def _landed(store: Store, topic: str) -> dict[int, int]:
    return {s.partition: s.next_offset for s in store.spans(topic)}


def _until(condition: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@contextmanager
def _running(config: Config) -> Iterator[tuple[Store, Worker, dict[str, Any]]]:
    """A worker on a thread; what it raised, if anything, is in the dict."""
    stop = threading.Event()
    outcome: dict[str, Any] = {}
    with open_store(config) as store:
        worker = build_worker(config, store, stop)

        def run() -> None:
            try:
                worker.run()
            except BaseException as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            yield store, worker, outcome
        finally:
            stop.set()
            thread.join(60)


def _produce(kafka: str, topic: str, partitions: int, count: int) -> None:
    _produce_more(kafka, topic, partitions, 0, count)


def _assert_exactly_once(data_dir: Path, topic: str, partitions: int, count: int) -> None:
    table = stored(data_dir, topic)
    keys = Counter(
        zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
    )
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    assert sorted(table.column("value").to_pylist()) == sorted(
        b"%d-%d" % (i % partitions, i) for i in range(count)
    )


def test_a_partition_whose_lock_is_held_waits_and_is_set_up_once_free(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """Another writer (a previous owner still sealing) holds partition 1's lock past the
    wait: the worker keeps partition 0 flowing, says which partition waits and why, and
    takes partition 1 once the lock is free, each record landing once."""
    topic = topic_factory(partitions=2)
    config = make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}")
    # The first wait for the lock is shutdown_timeout + 10 s.
    config = config.model_copy(update={"shutdown_timeout": 1.0})
    _produce(kafka, topic, 2, 40)
    held = PartitionLock.acquire(partition_dir(tmp_path, topic, 1), 1.0)
    with capture_logs() as logs, _running(config) as (store, _, outcome):
        try:
            _until(lambda: "error" in outcome or _landed(store, topic).get(0) == 20)
            assert "error" not in outcome, outcome
            assert 1 not in _landed(store, topic)
        finally:
            held.release()
        _until(lambda: "error" in outcome or _landed(store, topic) == {0: 20, 1: 20})
        assert "error" not in outcome, outcome
    failed = [e for e in logs if e["event"] == "partition_setup_failed"]
    assert failed, "the waiting partition was not logged"
    assert {(e["topic"], e["partition"]) for e in failed} == {(topic, 1)}
    assert "owned by another writer" in failed[0]["error"]
    _assert_exactly_once(tmp_path, topic, 2, 40)


def test_kafka_not_answering_at_assignment_leaves_the_partition_free_to_set_up_again(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka does not answer the watermark query of an assigned partition (after its lock
    was taken): the lock is let go, and the next attempt sets the partition up and reads
    it from the store's watermark, not from the group's committed offset (ahead here)."""
    topic = topic_factory(partitions=2)
    group = f"g-{topic}"
    config = make_config(kafka, tmp_path, [{"source": topic}], group=group)
    _produce(kafka, topic, 2, 40)
    with _running(config) as (store, _, outcome):
        _until(lambda: "error" in outcome or _landed(store, topic) == {0: 20, 1: 20})
    _produce_more(kafka, topic, 2, 40, 80)
    _set_committed(kafka, group, topic, {1: 35})
    real = assignment_module.start_offset
    calls: list[int] = []

    def timing_out(consumer: Any, tp: Any, watermark: int | None, **kwargs: Any) -> Any:
        calls.append(tp.partition)
        if tp.partition == 1 and calls.count(1) == 1:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get watermarks"))
        return real(consumer, tp, watermark, **kwargs)

    monkeypatch.setattr(assignment_module, "start_offset", timing_out)
    with capture_logs() as logs, _running(config) as (store, _, outcome):
        _until(lambda: "error" in outcome or _landed(store, topic) == {0: 40, 1: 40})
        assert "error" not in outcome, outcome
    (failed,) = [e for e in logs if e["event"] == "partition_setup_failed"]
    assert (failed["topic"], failed["partition"]) == (topic, 1)
    assert "Failed to get watermarks" in failed["error"]
    assert not [e for e in logs if e["event"] == "source_behind_store"]
    _assert_exactly_once(tmp_path, topic, 2, 80)


def _produce_more(kafka: str, topic: str, partitions: int, start: int, end: int) -> None:
    produce(
        kafka,
        topic,
        (
            Record(value=b"%d-%d" % (i % partitions, i), partition=i % partitions)
            for i in range(start, end)
        ),
    )


def _set_committed(kafka: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def test_workers_of_one_node_are_static_members_under_one_configured_id(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """One `group.instance.id` in the config and two workers: each joins under its own id
    (the config's, suffixed per worker). Under one id the second join fences the first out
    of the group, which then fails and is restarted, over and over."""
    topic = topic_factory(partitions=4)
    config = tmp_path / "plateau.yaml"
    write_config_file(
        config, kafka, topic, f"g-{topic}", kafka_extra={"group.instance.id": f"node-{topic}"}
    )
    produce(kafka, topic, (Record(value=f"r{i}".encode(), partition=i % 4) for i in range(4_000)))
    process = serve_process(config, workers=2)
    try:
        wait_landed(tmp_path / "data", topic, end_offsets(kafka, topic), timeout_s=90)
        # Both workers hold partitions, and neither was fenced and restarted on the way.
        deadline = time.monotonic() + 30
        while True:
            held = [len(w.get("partitions", [])) for w in read_status_files(tmp_path / "data")]
            if (len(held) == 2 and all(held)) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(held) == 2 and all(held), held
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr[-3000:]
    assert "fenced" not in stderr.lower(), stderr[-3000:]
    assert "worker_process_died" not in stderr, stderr[-3000:]
