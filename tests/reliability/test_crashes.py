"""The real `plateau serve` process: SIGTERM drains and commits; kill -9 at any point of a
seal (temp file, rename, manifest commit, Kafka commit) loses and duplicates nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from confluent_kafka import Producer

from bridge.demo.producer import Record, produce, producer_config
from plateau_core import Store
from plateau_core.names import TEMP_MARKER, segment_start
from tests.bridge_support import (
    committed,
    end_offsets,
    serve_process,
    serve_until_landed,
    wait_landed,
    write_config_file,
)
from tests.reliability.support import Recorder, every_offset, scale


def test_sigterm_drains_and_commits(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, reliability: Recorder
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
        stopping = time.monotonic()
        _, stderr = process.communicate(timeout=60)
        stop_s = time.monotonic() - stopping
    assert process.returncode == 0, stderr[-3000:]
    ends = end_offsets(kafka, topic)
    assert committed(kafka, group, topic, 3) == ends
    reliability.check(
        "SIGTERM",
        "serve with 2 worker processes stopped with SIGTERM once everything landed",
        tmp_path / "data",
        topic,
        every_offset(ends),
        stop_s=round(stop_s, 2),
        committed_equals_end=True,
    )
    assert not list((tmp_path / "data" / "run").glob("*.json")), "status files left behind"


def test_sigterm_to_the_whole_process_group_drains_and_commits(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    """systemd (KillMode=control-group) and Ctrl-C at a terminal signal every process of
    serve at once: the worker processes get the signal from there as well as from serve."""
    topic = topic_factory(partitions=2)
    group = f"g-{topic}"
    config = tmp_path / "plateau.yaml"
    write_config_file(config, kafka, topic, group)
    produce(kafka, topic, (Record(value=f"r{i}".encode(), partition=i % 2) for i in range(4_000)))
    process = serve_process(config, workers=2, new_session=True)
    try:
        wait_landed(tmp_path / "data", topic, end_offsets(kafka, topic), timeout_s=90)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert "exit_now" not in stderr, stderr[-3000:]
    assert process.returncode == 0, stderr[-3000:]
    assert committed(kafka, group, topic, 2) == end_offsets(kafka, topic)


def test_kill_9_during_seals_loses_and_duplicates_nothing(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, reliability: Recorder
) -> None:
    rng = random.Random(int(os.environ.get("PLATEAU_CRASH_SEED", "5")))
    topic = topic_factory(partitions=4)
    config = tmp_path / "plateau.yaml"
    data_dir = tmp_path / "data"
    # A killed consumer leaves the group only when its session times out. As a static
    # member (what a supervisor restarting serve on one host would configure) the next
    # process gets the partitions back at once under the same instance id, instead of each
    # round waiting out the session (the broker's minimum, 6 s, should that not happen).
    session = {
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1500,
        "group.instance.id": f"serve-{topic}",
    }
    write_config_file(config, kafka, topic, f"g-{topic}", kafka_extra=session)
    settings = yaml.safe_load(config.read_text())
    settings["defaults"]["roll"] = {"max_rows": 50_000, "max_age": "1s"}
    config.write_text(yaml.safe_dump(settings))
    rounds = scale(8, 24)
    done = threading.Event()
    produced = [0]

    # 1 KiB incompressible values at ~2.5 MB/s, sealed once a second: each seal writes
    # and fsyncs several hundred kB, long enough for a kill to land inside one.
    pool = os.urandom(1 << 20)

    def load() -> None:
        producer = Producer(producer_config(kafka))
        # Steady load until the last kill, bounded in case the test fails first.
        for c in range(20_000):
            if done.is_set():
                break
            for i in range(250):
                cut = (c * 250 + i) * 1031 % ((1 << 20) - 1100)
                value = f"r{c}-{i}:".encode() + pool[cut : cut + 1024]
                producer.produce(topic, value=value)
                produced[0] += 1
            producer.poll(0)
            time.sleep(0.1)
        assert producer.flush(60) == 0

    producer = threading.Thread(target=load)
    producer.start()
    kills: list[KillPoint] = []
    try:
        for round_ in range(rounds):
            before = _watermarks(data_dir, topic)
            process = serve_process(config)
            _wait_for_a_seal(data_dir, topic, before, process)
            if round_ % 2 == 0:
                # Every other kill lands while a seal's file is being written.
                _wait_for_a_temp_file(data_dir / "topics" / topic, timeout_s=5)
            else:
                # The others at a random moment: between seals, mid-commit, mid-consume.
                time.sleep(rng.uniform(0.0, 1.5))
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
            kills.append(_kill_point(data_dir, topic))
    finally:
        done.set()
        producer.join(timeout=180)
    ends = end_offsets(kafka, topic)
    recover_s, _ = serve_until_landed(config, data_dir, topic, ends, timeout_s=180)
    assert len(kills) == rounds
    reliability.check(
        "kill -9 during seals",
        f"serve killed with SIGKILL {rounds} times under a steady 2.5 MB/s load, half of "
        "them while a segment file was being written, half at random; restarted",
        data_dir,
        topic,
        every_offset(ends),
        produced=produced[0],
        recover_s=recover_s,
        kills=rounds,
        kills_with_a_seal_half_written=sum(1 for k in kills if k.temp_files),
        kills_between_rename_and_manifest=sum(1 for k in kills if k.orphans),
    )


@dataclass(frozen=True)
class KillPoint:
    """What a kill left on disk: temp files of seals being written, and segment files not
    yet recorded in the manifest (renamed, manifest commit not done)."""

    temp_files: int
    orphans: int


def _kill_point(data_dir: Path, topic: str) -> KillPoint:
    files = [p for p in (data_dir / "topics" / topic).glob("*/*") if p.is_file()]
    with Store.open(data_dir) as store:
        known = {store.segment_path(s) for s in store.manifest.segments(topic)}
    temps = [p for p in files if TEMP_MARKER in p.name]
    orphans = [p for p in files if segment_start(p.name) is not None and p not in known]
    return KillPoint(len(temps), len(orphans))


def _watermarks(data_dir: Path, topic: str) -> dict[int, int]:
    if not (data_dir / "manifest.db").exists():
        return {}
    with Store.open(data_dir) as store:
        return {s.partition: s.next_offset for s in store.spans(topic)}


def _wait_for_a_temp_file(topic_dir: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(TEMP_MARKER in p.name for p in topic_dir.glob("*/*")):
            return
        time.sleep(0.001)


def _wait_for_a_seal(
    data_dir: Path, topic: str, before: dict[int, int], process: subprocess.Popen[str]
) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        now = _watermarks(data_dir, topic)
        if any(offset > before.get(p, 0) for p, offset in now.items()):
            return
        time.sleep(0.05)
    raise AssertionError("serve sealed nothing within 60 s of starting")
