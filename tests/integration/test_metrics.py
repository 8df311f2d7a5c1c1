"""/metrics, /healthz and /readyz of a real `plateau serve` against the real broker: the
figures agree with what was produced and landed, pauses show up, a blocked writer turns
/readyz red and its release turns it green again."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from bridge.demo.producer import Record, produce
from bridge.local_kafka import free_port
from plateau_core import Store
from tests.bridge_support import (
    end_offsets,
    get,
    make_config,
    serve_process,
    serving,
    wait_landed,
    wait_readyz,
    with_metrics,
    write_config_file,
)
from tests.support import GatedDisk, SlowDisk, writers_write_with

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    status, text = get(port, "/metrics")
    assert status == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def values(samples: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples of one metric whose labels include `labels`."""
    return {
        key: value
        for (metric, key), value in samples.items()
        if metric == name and set(labels.items()) <= set(key)
    }


def per_partition(samples: Samples, name: str, topic: str) -> dict[int, float]:
    return {
        int(dict(key)["partition"]): value
        for key, value in values(samples, name, topic=topic).items()
    }


def wait_for(port: int, check: Callable[[Samples], bool], timeout_s: float = 60.0) -> Samples:
    deadline = time.monotonic() + timeout_s
    samples: Samples = {}
    while time.monotonic() < deadline:
        samples = scrape(port)
        if check(samples):
            return samples
        time.sleep(0.3)
    raise AssertionError(f"metrics never matched; last scrape: {sorted(samples.items())[:80]}")


def test_metrics_agree_with_what_was_produced_and_landed(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=3)
    port = free_port()
    config = with_metrics(
        make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}"), port
    )
    first = produce(kafka, topic, (Record(value=f"a{i}".encode()) for i in range(12_000)))
    with serving(config):
        # While serving, more arrives: the figures must follow it to the end.
        second = produce(kafka, topic, (Record(value=f"b{i}".encode()) for i in range(8_000)))
        produced = first + second
        ends = end_offsets(kafka, topic)
        assert sum(ends.values()) == produced
        wait_landed(tmp_path, topic, ends)

        def caught_up(samples: Samples) -> bool:
            return (
                per_partition(samples, "plateau_lag_records", topic) == dict.fromkeys(ends, 0)
                and per_partition(samples, "plateau_kafka_committed_offset", topic) == ends
                and sum(values(samples, "plateau_records_ingested_total").values()) == produced
            )

        samples = wait_for(port, caught_up)
        assert get(port, "/healthz") == (200, "ok\n")
        # /readyz answers from the monitor's last look at the workers' files (each second),
        # which may come just before the scrape above.
        wait_readyz(port, lambda body: body["ready"] and body["assigned_partitions"] == 3)
        samples = wait_for(port, caught_up)  # plateau_ready is the same look's

    with Store.open(tmp_path) as store:
        spans = {s.partition: s for s in store.spans(topic)}
    assert per_partition(samples, "plateau_records_ingested_total", topic) == ends
    assert per_partition(samples, "plateau_kafka_end_offset", topic) == ends
    assert per_partition(samples, "plateau_watermark_offset", topic) == ends
    assert per_partition(samples, "plateau_consumed_offset", topic) == ends
    assert per_partition(samples, "plateau_oldest_unsealed_age_seconds", topic) == dict.fromkeys(
        ends, 0.0
    )
    segments = sum(s.segments for s in spans.values())
    assert per_partition(samples, "plateau_seals_total", topic) == {
        p: s.segments for p, s in spans.items()
    }
    assert sum(per_partition(samples, "plateau_sealed_records_total", topic).values()) == produced
    assert sum(per_partition(samples, "plateau_sealed_bytes_total", topic).values()) == sum(
        s.bytes for s in spans.values()
    )
    assert values(samples, "plateau_seal_duration_seconds_count", topic=topic) == {
        (("topic", topic),): segments
    }
    assert values(samples, "plateau_store_records", topic=topic) == {(("topic", topic),): produced}
    assert values(samples, "plateau_store_segments", topic=topic) == {(("topic", topic),): segments}
    # Nothing was replicated: every landed record counts as replication lag.
    assert per_partition(samples, "plateau_replication_lag_records", topic) == ends
    assert samples[("plateau_ready", ())] == 1
    assert samples[("plateau_stalled_partitions", ())] == 0
    assert sum(values(samples, "plateau_assigned_partitions").values()) == 3
    assert samples[("plateau_store_footprint_bytes", ())] >= sum(s.bytes for s in spans.values())
    assert sum(values(samples, "plateau_errors_total").values()) == 0


def test_a_forced_pause_shows_up(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = topic_factory(partitions=4)
    total = 30_000
    produce(kafka, topic, (Record(value=b"x" * 100 + str(i).encode()) for i in range(total)))
    writers_write_with(monkeypatch, SlowDisk(0.05))
    port = free_port()
    config = with_metrics(
        make_config(
            kafka,
            tmp_path,
            [{"source": topic}],
            group=f"g-{topic}",
            storage={"memory_budget": 256 * 1024, "writer_threads": 1},
            roll={"max_rows": 1500, "max_age": "5s"},
            kafka_extra={"poll_batch": 500},
        ),
        port,
    )
    with serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic), timeout_s=120)
        samples = wait_for(
            port,
            lambda s: sum(values(s, "plateau_records_ingested_total").values()) == total,
        )
    pauses = values(samples, "plateau_pauses_total")
    paused_s = values(samples, "plateau_paused_seconds_total")
    assert sum(pauses.values()) > 0, pauses
    assert sum(paused_s.values()) > 0, paused_s
    # Each reason that paused a partition also accounts for time spent paused.
    for key, count in pauses.items():
        assert (count > 0) == (paused_s[key] > 0), (key, count, paused_s[key])


def test_readyz_goes_red_while_a_writer_blocks_and_green_after(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = topic_factory(partitions=1)
    disk = GatedDisk(timeout_s=120)
    writers_write_with(monkeypatch, disk)
    port = free_port()
    config = with_metrics(
        make_config(kafka, tmp_path, [{"source": topic}], group=f"g-{topic}"),
        port,
        stall_after=1.0,
    )
    total = produce(kafka, topic, (Record(value=f"r{i}".encode()) for i in range(500)))
    with capture_logs() as logs, serving(config):
        try:
            assert disk.entered.wait(60), "no seal started"
            red = wait_readyz(port, lambda body: bool(body["stalled"]))
            assert red["ready"] is False
            assert [s.split(" ")[0] for s in red["stalled"]] == [f"{topic}[0]"], red
            assert scrape(port)[("plateau_stalled_partitions", ())] == 1
        finally:
            disk.gate.set()
        green = wait_readyz(port, lambda body: bool(body["ready"]))
        assert green["stalled"] == []
        assert scrape(port)[("plateau_stalled_partitions", ())] == 0
        wait_landed(tmp_path, topic, {0: total})
    stalls = [e for e in logs if e["event"] == "partition_stalled"]
    assert [(e["topic"], e["partition"], e["log_level"]) for e in stalls] == [(topic, 0, "error")]
    assert any(e["event"] == "partition_progressing" and e["topic"] == topic for e in logs)


def test_worker_processes_are_summed_and_a_killed_worker_counts_on(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=4)
    port = free_port()
    config = tmp_path / "plateau.yaml"
    # A killed worker leaves the group only when its session times out: the broker's
    # minimum (6 s) instead of librdkafka's 45 s lets its partitions move on sooner.
    session = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1500}
    write_config_file(
        config,
        kafka,
        topic,
        f"g-{topic}",
        metrics_listen=f"127.0.0.1:{port}",
        kafka_extra=session,
    )
    first = produce(kafka, topic, (Record(value=f"a{i}".encode()) for i in range(20_000)))
    process = serve_process(config, workers=2)
    try:
        _wait_up(port, process)
        before = wait_for(
            port,
            lambda s: (
                len(values(s, "plateau_assigned_partitions")) == 2
                and sum(values(s, "plateau_assigned_partitions").values()) == 4
                and sum(values(s, "plateau_records_ingested_total").values()) == first
            ),
        )
        files = sorted((tmp_path / "data" / "run").glob("*.worker-1.json"))
        victim = json.loads(files[0].read_text())["pid"]
        assert victim != process.pid
        os.kill(victim, signal.SIGKILL)
        second = produce(kafka, topic, (Record(value=f"b{i}".encode()) for i in range(8_000)))
        wait_landed(tmp_path / "data", topic, end_offsets(kafka, topic), timeout_s=90)
        after = wait_for(
            port,
            lambda s: (
                s[("plateau_worker_restarts_total", ())] == 1
                and sum(values(s, "plateau_records_ingested_total").values()) >= first + second
                and s[("plateau_ready", ())] == 1
            ),
            timeout_s=90,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr[-3000:]
    assert values(after, "plateau_errors_total", kind="worker_died") == {
        (("kind", "worker_died"),): 1
    }
    # Counters carry on from the killed worker: no partition's count went backwards (a
    # replay of what was buffered but not sealed may count records twice, never fewer).
    ingested_before = values(before, "plateau_records_ingested_total")
    ingested_after = values(after, "plateau_records_ingested_total")
    assert all(ingested_after[key] >= count for key, count in ingested_before.items())


def _wait_up(port: int, process: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        try:
            if get(port, "/healthz")[0] == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("serve's endpoint never answered")


def test_serve_without_a_reachable_broker_stays_up_and_says_why(tmp_path: Path) -> None:
    port = free_port()
    # Nothing listens on the broker's port: Kafka is unreachable from the start.
    config = with_metrics(
        make_config(f"127.0.0.1:{free_port()}", tmp_path, [{"source": "t"}], group="g"), port
    )
    with capture_logs() as logs, serving(config):
        down = wait_readyz(
            port, lambda body: any("brokers down" in r or "no broker" in r for r in body["reasons"])
        )
        assert down["ready"] is False
        assert get(port, "/healthz")[0] == 200
    errors = [e for e in logs if e["event"] == "kafka_client_error"]
    assert errors and all(e["log_level"] == "warning" for e in errors)
    assert any(e["code"] == "_ALL_BROKERS_DOWN" for e in errors)
