"""Under load: a rebalance between workers, and pauses under a tiny memory budget."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from bridge.consume.build import build_worker
from bridge.demo.producer import Record, produce
from plateau_core import Store
from tests.bridge_support import end_offsets, make_config, serving, stored, wait_landed
from tests.support import SlowDisk


def _steady_producer(kafka: str, topic: str, total: int, chunks: int) -> threading.Thread:
    def run() -> None:
        per = total // chunks
        for c in range(chunks):
            produce(
                kafka,
                topic,
                (Record(value=f"r{i}".encode()) for i in range(c * per, (c + 1) * per)),
            )
            time.sleep(0.1)

    thread = threading.Thread(target=run, name="producer")
    thread.start()
    return thread


def _assert_exactly_once(tmp_path: Path, topic: str, total: int) -> None:
    table = stored(tmp_path, topic)
    counts = Counter(table.column("value").to_pylist())
    duplicates = [v for v, n in counts.items() if n > 1]
    missing = total - len(counts)
    assert not duplicates, f"{len(duplicates)} duplicated, e.g. {duplicates[:3]}"
    assert missing == 0, f"{missing} records missing"
    assert table.num_rows == total


def test_two_workers_and_a_rebalance_under_load(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=6)
    config = make_config(
        kafka, tmp_path, [{"source": topic}], group=f"g-{topic}", roll={"max_rows": 2000}
    )
    total = 60_000
    producer = _steady_producer(kafka, topic, total, chunks=40)
    with ExitStack() as both:
        both.enter_context(serving(config))  # worker A
        time.sleep(1.5)
        with serving(config):  # worker B joins, then A leaves while B runs
            time.sleep(1.5)
            both.close()  # A stops gracefully: its partitions are sealed, committed, handed over
            producer.join(timeout=120)
            wait_landed(tmp_path, topic, end_offsets(kafka, topic), timeout_s=90)
    _assert_exactly_once(tmp_path, topic, total)


def test_tiny_memory_budget_and_slow_writer_pause_without_loss(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=4)
    total = 40_000
    produce(kafka, topic, (Record(value=b"x" * 100 + str(i).encode()) for i in range(total)))
    budget = 256 * 1024
    config = make_config(
        kafka,
        tmp_path,
        [{"source": topic}],
        group=f"g-{topic}",
        storage={"memory_budget": budget, "writer_threads": 1},
        roll={"max_rows": 1500, "max_age": "5s"},
        kafka_extra={"poll_batch": 500},
    )
    store = Store.open(tmp_path)
    stop = threading.Event()
    worker = build_worker(config, store, stop)
    worker.writer._write_segment = SlowDisk(0.05)
    peak = 0
    thread = threading.Thread(target=worker.run, name="worker")
    thread.start()
    try:
        deadline = time.monotonic() + 120
        expected = end_offsets(kafka, topic)
        while time.monotonic() < deadline:
            stats = worker.writer.stats()
            peak = max(peak, stats.buffered_bytes + stats.in_flight_bytes)
            spans = {s.partition: s.next_offset for s in store.spans(topic)}
            if all(spans.get(p, 0) >= end for p, end in expected.items()):
                break
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(timeout=60)
        store.close()
    assert sum(worker.stats.pauses.values()) > 0, "the budget never made a partition pause"
    assert worker.stats.resumes > 0
    # Memory stays within the budget plus one poll's batch for one partition.
    assert peak <= budget + 500 * 200
    _assert_exactly_once_values(tmp_path, topic, total)


def _assert_exactly_once_values(tmp_path: Path, topic: str, total: int) -> None:
    table = stored(tmp_path, topic)
    values = Counter(table.column("value").to_pylist())
    assert values == Counter(b"x" * 100 + str(i).encode() for i in range(total))
