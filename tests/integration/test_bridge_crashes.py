"""The real `plateau serve` process: SIGTERM drains and commits; kill -9 loses nothing."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bridge.produce import Record, produce
from tests.bridge_support import (
    committed,
    end_offsets,
    serve_process,
    stored,
    wait_landed,
    write_config_file,
)


def _check_exactly_once(data_dir: Path, topic: str, total: int) -> None:
    table = stored(data_dir, topic)
    counts = Counter(table.column("value").to_pylist())
    assert [v for v, n in counts.items() if n > 1] == []
    assert len(counts) == total, f"{total - len(counts)} records missing"
    assert table.num_rows == total


def test_sigterm_drains_and_commits(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=3)
    group = f"g-{topic}"
    config = tmp_path / "plateau.yaml"
    write_config_file(config, kafka, topic, group)
    # Every partition gets records: one without any would have no offset to commit.
    records = (Record(value=f"r{i}".encode(), partition=i % 3) for i in range(20_000))
    produce(kafka, topic, records)
    process = serve_process(config, workers=2)
    try:
        wait_landed(tmp_path / "data", topic, end_offsets(kafka, topic), timeout_s=90)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr[-3000:]
    ends = end_offsets(kafka, topic)
    assert committed(kafka, group, topic, 3) == ends
    _check_exactly_once(tmp_path / "data", topic, 20_000)
    assert not list((tmp_path / "data" / "run").glob("*.json")), "status files left behind"


def test_kill_9_at_random_moments_loses_and_duplicates_nothing(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    rng = random.Random(int(os.environ.get("PLATEAU_CRASH_SEED", "5")))
    topic = topic_factory(partitions=4)
    config = tmp_path / "plateau.yaml"
    write_config_file(config, kafka, topic, f"g-{topic}")
    total, chunks = 100_000, 50

    def load() -> None:
        per = total // chunks
        for c in range(chunks):
            produce(
                kafka,
                topic,
                (Record(value=f"r{i}".encode()) for i in range(c * per, (c + 1) * per)),
            )
            time.sleep(0.15)

    producer = threading.Thread(target=load)
    producer.start()
    kills = 0
    try:
        for _ in range(6):
            process = serve_process(config)
            time.sleep(rng.uniform(1.5, 4.0))
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
            kills += 1
    finally:
        producer.join(timeout=180)
    process = serve_process(config)
    try:
        wait_landed(tmp_path / "data", topic, end_offsets(kafka, topic), timeout_s=120)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    assert kills == 6
    _check_exactly_once(tmp_path / "data", topic, total)
