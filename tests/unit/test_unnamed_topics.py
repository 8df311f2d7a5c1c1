"""Topics of a store that the config does not name: a topic removed from `topics` after it
landed data, a roll-up no longer declared, the dead letters of a produced topic, topics
producers created through the Kafka API. Retention still bounds them, `plateau status`
says what they hold, and `plateau drop-topic` removes them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from bridge.cli import main
from bridge.config import load_config
from bridge.config.models import Config
from bridge.kafka_api.topics import ProducedTopics
from bridge.ops.metrics import ServeCollector, ServeCounters
from bridge.ops.monitor import Monitor
from bridge.ops.status import collect, render
from bridge.ops.worker_status import new_run_id
from bridge.store import open_store, retention_for
from plateau_core import PartitionLockedError, RollPolicy, SegmentState, Store, WriterPolicy
from plateau_core.rollup import RollupPolicy, rollup_metrics
from plateau_core.topic_drop import drop_topic
from tests.support import BASE_MS, HOUR_MS, batch, fill_segments

# Named by the config: a consumed topic, a produced topic's dead letters. Not named: a
# consumed topic removed, a roll-up no longer declared, a topic producers created, and a
# produced topic removed from the config (the manifest still records it).
UNNAMED = ("gone", "logs.rollup.1m", "auto", "old")


def _rolled_up(store: Store) -> None:
    """Four segments of `logs` an hour apart, each rolled up into `logs.rollup.1m`."""
    policy = RollupPolicy("1m", 60_000, (), rollup_metrics(["count"]))
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_age_s=3600), rollups=(policy,))
        for i in range(4):
            offsets = range(i * 10, (i + 1) * 10)
            writer.append("logs", 0, batch(offsets, times=[BASE_MS + i * HOUR_MS] * 10))
            writer.flush()
    finally:
        writer.close()


def _write_config(tmp_path: Path, **storage: object) -> Path:
    path = tmp_path / "plateau.yaml"
    body: dict[str, Any] = {
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "group_id": "g"},
        "storage": {"data_dir": "data", "deletion_grace": "0s", **storage},
        "defaults": {"retention": {"max_age": "150m"}},
        "kafka_api": {"listen": "127.0.0.1:0"},
        "topics": [
            {"source": "kept", "retention": {"max_age": "1000d"}},
            {"source": "logs", "retention": {"max_age": "1000d"}},  # its roll-up removed
            {"name": "p", "format": "json", "on_error": "dlq", "dlq": "p.dlq"},
        ],
    }
    path.write_text(yaml.safe_dump(body))
    return path


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    with Store.open(tmp_path / "data") as store:
        for topic in ("kept", "gone", "p.dlq", "auto", "old"):
            fill_segments(store, 0, 4, topic=topic)
        _rolled_up(store)
        store.manifest.ensure_produced_topic("auto", 1, "produce")
        store.manifest.ensure_produced_topic("old", 1, "config")
    return tmp_path / "data"


def _load(tmp_path: Path, **storage: object) -> Config:
    return load_config(_write_config(tmp_path, **storage), env={})


def _live(store: Store, topic: str) -> list[int]:
    return [s.start_offset for s in store.manifest.segments(topic)]


def test_unnamed_topics_age_out_under_the_defaults(tmp_path: Path, store_dir: Path) -> None:
    config = _load(tmp_path)
    with open_store(config) as store:
        retention = retention_for(config, store)
        for topic in (*UNNAMED, "p.dlq"):
            assert retention.policy(topic).max_age_s == 150 * 60
        # Segment i's newest record is at i hours: at 5 h, 150 minutes keep only the last.
        retention.run(now=BASE_MS + 5 * HOUR_MS)
        # A roll-up segment starts at its raw segment's first offset.
        for topic in ("gone", "logs.rollup.1m", "auto", "old", "p.dlq"):
            assert _live(store, topic) == [30], topic
        assert _live(store, "kept") == [0, 10, 20, 30]
        assert _live(store, "logs") == [0, 10, 20, 30]


def test_unnamed_topics_count_toward_the_store_limit(tmp_path: Path, store_dir: Path) -> None:
    config = _load(tmp_path, max_bytes="1GiB")
    with open_store(config) as store:
        # Only `gone`, which nothing names, is left readable.
        for topic in ("kept", "p.dlq", "auto", "old", "logs", "logs.rollup.1m"):
            store.manifest.mark_deleting([row.id for row in store.manifest.segments(topic)])
        retention = retention_for(config, store)
        assert not retention.over_limits()
        # A limit of about two of its segments: the watch sees it crossed, and a pass
        # retires its two oldest.
        segment = store.manifest.segments("gone")[0].size_bytes
        limit = store.manifest.database_bytes() + 2 * segment + segment // 2
        retention.limits = dataclasses.replace(retention.limits, max_bytes=limit)
        assert retention.over_limits()
        report = retention.run(now=BASE_MS)
        assert [s.start_offset for s in report.global_marked] == [0, 10]
        assert _live(store, "gone") == [20, 30]


def test_status_says_which_topics_the_config_does_not_name(tmp_path: Path, store_dir: Path) -> None:
    document, _ = collect(_load(tmp_path), timeout_s=1.0)
    topics = document["topics"]
    assert {t: body["config"] for t, body in topics.items()} == {
        "kept": "topic",
        "logs": "topic",
        "p.dlq": "dlq",
        "gone": None,
        "logs.rollup.1m": None,
        "auto": None,
        "old": None,
    }
    assert sorted(t for t, body in topics.items() if body["kafka_api"]) == ["auto"]
    text = render(document, as_json=False)
    assert "not in the config: gone: 4 segments" in text
    assert "not in the config: logs.rollup.1m: 4 segments" in text
    auto = next(line for line in text.splitlines() if line.startswith("not in the config: auto"))
    assert "producers may still write to it through the Kafka API" in auto
    assert "plateau drop-topic" in auto
    assert "not in the config: kept" not in text and "not in the config: p.dlq" not in text


def test_status_shows_consolidation_only_where_a_writer_consolidates(
    tmp_path: Path, store_dir: Path
) -> None:
    # The Kafka API's writer merges the topics it opens and their dead letters; a removed
    # consumed topic or roll-up is written and merged by nothing.
    document, _ = collect(_load(tmp_path), timeout_s=1.0)
    merged = sorted(t for t, body in document["topics"].items() if "consolidate" in body)
    assert merged == ["auto", "p.dlq"]


def test_a_produced_topic_removed_from_the_config_is_no_longer_served(
    tmp_path: Path, store_dir: Path
) -> None:
    # Served on, it would turn into a raw topic under the defaults: a json topic's producers
    # would land undecoded records in it without a word.
    config = _load(tmp_path)
    assert config.kafka_api is not None
    with open_store(config) as store:
        topics = ProducedTopics(config, config.kafka_api, store.manifest)
        assert "old" not in topics.partitions
        assert topics.partitions["auto"] == 1  # producers created it: theirs, served
        assert topics.mapping("p").format == "json"
        document, _ = collect(config, timeout_s=1.0)
        assert document["topics"]["old"]["kafka_api"] is False
        # Created again by producers (auto_create_topics or CreateTopics), it is theirs.
        assert topics.record("old", 4, "create_topics") == 4
        assert ProducedTopics(config, config.kafka_api, store.manifest).partitions["old"] == 4
        assert store.manifest.produced_topic_origins()["old"] == "create_topics"


def test_metrics_show_the_bytes_of_every_topic_of_the_store(
    tmp_path: Path, store_dir: Path
) -> None:
    config = _load(tmp_path)
    with open_store(config) as store:
        monitor = Monitor(store_dir, new_run_id(), stall_after_s=60)
        collector = ServeCollector(config, store, monitor, ServeCounters())
        families = {family.name: family for family in collector.collect()}
    shown = {s.labels["topic"]: s.value for s in families["plateau_store_bytes"].samples}
    assert set(UNNAMED) <= set(shown)
    assert all(shown[topic] > 0 for topic in UNNAMED)


def test_drop_topic_retires_a_topic_the_config_does_not_name(
    tmp_path: Path, store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write_config(tmp_path, deletion_grace="1h")
    with Store.open(store_dir) as store:
        reading = store.read("gone")  # a query planned before the drop
        files = [store.segment_path(s) for s in store.manifest.segments("gone")]
        assert main(["drop-topic", "--config", str(path), "gone", "--yes"]) == 0
        out = capsys.readouterr().out
        assert "dropped 4 segments" in out and "4 files wait out" in out
        assert store.read("gone").to_table().num_rows == 0  # gone for new queries
        assert reading.to_table().num_rows == 40  # the running one reads its files still
        assert all(f.exists() for f in files)
        assert store.manifest.watermark("gone", 0) == 40
        # The other topics are untouched.
        assert _live(store, "logs.rollup.1m") != []
        assert _live(store, "kept") == [0, 10, 20, 30]
    # Once the grace has passed, retention (here the command run again) deletes the files.
    path = _write_config(tmp_path, deletion_grace="0s")
    assert main(["drop-topic", "--config", str(path), "gone", "--yes"]) == 0
    assert "dropped 0 segments" in capsys.readouterr().out
    assert not any(f.exists() for f in files)
    with Store.open(store_dir) as store:
        assert store.manifest.segments("gone", states=tuple(SegmentState)) == []
        assert store.manifest.watermark("gone", 0) == 40


@pytest.mark.parametrize(
    ("topic", "said"),
    [
        ("kept", "the topic of mapping source 'kept'"),
        ("p", "produced topic 'p'"),
        ("p.dlq", "the dead-letter topic of produced topic 'p'"),
    ],
)
def test_drop_topic_refuses_a_topic_the_config_names(
    tmp_path: Path, store_dir: Path, topic: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write_config(tmp_path)
    assert main(["drop-topic", "--config", str(path), topic, "--yes"]) == 2
    assert said in capsys.readouterr().err
    with Store.open(store_dir) as store:
        assert store.manifest.segments(topic, states=(SegmentState.DELETING,)) == []


def test_drop_topic_refuses_a_declared_rollup_and_one_a_regex_lands_in(
    tmp_path: Path, store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "regex.yaml"
    rollup = {"granularity": "1m", "metrics": ["count"]}
    path.write_text(
        yaml.safe_dump(
            {
                "storage": {"data_dir": "data"},
                "topics": [{"source": "logs", "rollups": [rollup]}, {"source": "regex:go.*"}],
            }
        )
    )
    assert main(["drop-topic", "--config", str(path), "logs.rollup.1m", "--yes"]) == 2
    assert "the 1m roll-up of topic 'logs'" in capsys.readouterr().err
    assert main(["drop-topic", "--config", str(path), "gone", "--yes"]) == 2
    assert "mapping source 'regex:go.*'" in capsys.readouterr().err
    assert main(["drop-topic", "--config", str(path), "nothing", "--yes"]) == 2
    assert "no topic 'nothing'" in capsys.readouterr().err


def test_drop_topic_asks_first(
    tmp_path: Path, store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write_config(tmp_path)
    assert main(["drop-topic", "--config", str(path), "gone"]) == 2
    captured = capsys.readouterr()
    assert "4 segments" in captured.out and "--yes" in captured.err
    with Store.open(store_dir) as store:
        assert _live(store, "gone") == [0, 10, 20, 30]


def test_drop_topic_refuses_a_topic_a_writer_owns(store_dir: Path) -> None:
    # The Kafka API of a running serve owns a topic producers created: its next seals
    # would land beside what was dropped.
    with Store.open(store_dir) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("auto", 0)
            with pytest.raises(PartitionLockedError, match=r"auto\[0\] is owned by a writer"):
                drop_topic(store, "auto")
        finally:
            writer.close()
        assert _live(store, "auto") == [0, 10, 20, 30]
        assert len(drop_topic(store, "auto")) == 4


def test_drop_topic_takes_quarantined_segments_too_and_logs_each(store_dir: Path) -> None:
    with Store.open(store_dir) as store:
        first = store.manifest.segments("gone")[0]
        store.manifest.quarantine(first.id, "truncated")
        with capture_logs() as logs:
            dropped = drop_topic(store, "gone", at=BASE_MS)
        assert [s.start_offset for s in dropped] == [0, 10, 20, 30]
        retired = [e for e in logs if e["event"] == "segment_retired"]
        assert [
            (e["topic"], e["partition"], e["start_offset"], e["end_offset"]) for e in retired
        ] == [("gone", 0, start, start + 10) for start in (0, 10, 20, 30)]
        assert all(e["reason"] == "topic_dropped" for e in retired)
        assert [e["segments"] for e in logs if e["event"] == "topic_dropped"] == [4]
        rows = store.manifest.segments("gone", states=tuple(SegmentState))
        assert {(s.state, s.deleting_at) for s in rows} == {(SegmentState.DELETING, BASE_MS)}
