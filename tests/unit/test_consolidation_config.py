"""`topics[].consolidate` from the configuration to a writer's consolidation, with its
metrics counted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from bridge.config import load_config
from bridge.config.topics import ConsolidateConfig
from bridge.errors import ConfigError
from bridge.ops.telemetry import WorkerTelemetry, parse_dump
from bridge.store import consolidator_for, open_store
from plateau_core import RollPolicy, WriterPolicy
from tests.core.test_blooms import _batch
from tests.core.test_rollups import POLICY
from tests.core.test_rollups import _rows as rows
from tests.core.test_rollups import _write as write_rollups
from tests.support import append_patiently


def _config(tmp_path: Path, topics: list[dict[str, object]]) -> Path:
    path = tmp_path / "plateau.yaml"
    body = {"storage": {"data_dir": str(tmp_path / "data")}, "topics": topics}
    path.write_text(yaml.safe_dump(body))
    return path


def test_consolidate_becomes_the_policy_and_is_off_by_default(tmp_path: Path) -> None:
    topics = [
        {"source": "a", "consolidate": {"target_bytes": "8MiB", "min_age": "5m"}},
        {"source": "b"},
        {"source": "c", "consolidate": {}},
    ]
    config = load_config(_config(tmp_path, topics), env={})
    first = config.topics[0].consolidate
    assert first is not None
    assert (first.policy().target_bytes, first.policy().min_age_s) == (8 * 1024**2, 300.0)
    assert config.topics[1].consolidate is None
    third = config.topics[2].consolidate
    assert third is not None and third.policy().target_bytes == 64 * 1024**2
    assert third.policy().small_below == 8 * 1024**2  # merge_below
    assert first.policy().small_below == 8 * 1024**2  # the target, equal here


@pytest.mark.parametrize(
    ("field", "value"), [("target_bytes", "lots"), ("merge_below", "0"), ("target_bytes", 0)]
)
def test_bad_consolidate_names_the_field(tmp_path: Path, field: str, value: object) -> None:
    topics = [{"source": "a", "consolidate": {field: value}}]
    with pytest.raises(ConfigError, match=rf"topics\.0\.consolidate\.{field}"):
        load_config(_config(tmp_path, topics), env={})


def test_a_writer_consolidates_the_topics_configured_and_counts_it(tmp_path: Path) -> None:
    topics = [
        {"source": "logs", "consolidate": {"min_age": "0s"}, "index": {"bloom": ["request_id"]}},
        {"source": "other"},
    ]
    config = load_config(_config(tmp_path, topics), env={})
    telemetry = WorkerTelemetry()
    with open_store(config) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            for topic in ("logs", "other"):
                writer.acquire(topic, 0, roll=RollPolicy(max_rows=50, max_age_s=3600))
                for i in range(4):
                    append_patiently(writer, topic, 0, _batch(i * 50))
            writer.flush()
            report = consolidator_for(config, store, writer, telemetry).run()
        finally:
            writer.close()
        assert [(m.topic, m.segments) for m in report.merged] == [("logs", 4)]
        assert len(store.manifest.segments("logs")) == 1
        assert len(store.manifest.segments("other")) == 4
        [merged] = store.manifest.segments("logs")
        assert set(store.manifest.blooms("logs", ["request_id"])) == {merged.id}
    counters, _ = parse_dump(telemetry.dump())
    counted = dict(counters)
    assert counted[("consolidations", ("logs",))] == 1
    assert counted[("consolidated_segments", ("logs",))] == 3


def test_with_a_replication_target_only_replicated_segments_are_merged(tmp_path: Path) -> None:
    path = tmp_path / "plateau.yaml"
    body = {
        "storage": {"data_dir": str(tmp_path / "data")},
        "replication": {"target": str(tmp_path / "replica")},
        "topics": [{"source": "logs", "consolidate": {"min_age": "0s"}}],
    }
    path.write_text(yaml.safe_dump(body))
    config = load_config(path, env={})
    with open_store(config) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("logs", 0, roll=RollPolicy(max_rows=50, max_age_s=3600))
            for i in range(6):
                append_patiently(writer, "logs", 0, _batch(i * 50))
            writer.flush()
            consolidator = consolidator_for(config, store, writer)
            assert consolidator.run().merged == []  # all sealed: a replication may copy them
            rows = store.manifest.segments("logs")
            store.manifest.mark_replicated([r.id for r in rows[:3]])
            [merge] = consolidator.run().merged
        finally:
            writer.close()
        assert (merge.start_offset, merge.end_offset, merge.segments) == (0, 150, 3)
        assert [s.state.value for s in store.manifest.segments("logs")] == [
            "replicated",
            "sealed",
            "sealed",
            "sealed",
        ]


def test_status_shows_the_policy_and_what_workers_merged(tmp_path: Path) -> None:
    from bridge.ops import status  # noqa: PLC0415

    topics = [{"source": "logs", "consolidate": {"target_bytes": "1MiB", "min_age": "30s"}}]
    config = load_config(_config(tmp_path, topics), env={})
    telemetry = WorkerTelemetry()
    telemetry.add("consolidated_segments", ("logs",), 40)
    telemetry.add("consolidated_segments", ("other",), 2)
    row = {
        "next_offset": 1,
        "replicated_offset": 0,
        "committed_offset": None,
        "end_offset": None,
        "lag": None,
        "segments": 3,
        "records": 1,
        "bytes": 1,
        "time_max": None,
        "paused": None,
    }
    named = {"config": "topic", "kafka_api": False}
    unnamed = {"config": None, "kafka_api": False}
    document: dict[str, object] = {
        "topics": {
            "logs": {"partitions": {"0": row}, **named},
            "other": {"partitions": {"0": row}, **unnamed},
        }
    }
    status._add_consolidation(config, document["topics"], [{"telemetry": telemetry.dump()}])  # type: ignore[arg-type]
    assert document["topics"]["logs"]["consolidate"] == {  # type: ignore[index]
        "target_bytes": 1024**2,
        "merge_below_bytes": 1024**2,  # merge_below's 8 MiB is over the target
        "min_age_s": 30.0,
        "segments_removed": 40,
    }
    assert "consolidate" not in document["topics"]["other"]  # type: ignore[index]
    text = status.render(document, as_json=False)
    assert (
        "consolidate logs: segments under 1,048,576 bytes older than 30 s into up to 1,048,576 "
        "bytes; 40 segments" in text
    )


# A regex mapping matches its roll-up topics' names too: they are still its roll-ups.
@pytest.mark.parametrize("source", ["logs", "regex:lo.*"])
def test_a_rollup_topic_is_consolidated_with_its_topic(tmp_path: Path, source: str) -> None:
    rollup = {
        "granularity": "1m",
        "dimensions": ["service", "level"],
        "metrics": ["count", "sum:latency", "min:latency", "max:latency", "distinct:user"],
    }
    topics = [{"source": source, "consolidate": {"min_age": "0s"}, "rollups": [rollup]}]
    config = load_config(_config(tmp_path, topics), env={})
    assert config.topics[0].rollup_policies() == (POLICY,)
    with open_store(config) as store:
        write_rollups(store, rows(5, 500), 100)  # five raw segments, five roll-up segments
        before = store.read("logs.rollup.1m").to_table()
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            # The raw partition's writer holds both: only its seals write the roll-up one.
            writer.acquire("logs", 0, rollups=(POLICY,))
            report = consolidator_for(config, store, writer).run()
        finally:
            writer.close()
        merged = {(m.topic, m.segments) for m in report.merged}
        assert merged == {("logs", 5), ("logs.rollup.1m", 5)}
        assert len(store.manifest.segments("logs.rollup.1m")) == 1
        assert store.read("logs.rollup.1m").to_table().equals(before)


def test_a_writer_does_not_consolidate_below_min_free_disk(tmp_path: Path) -> None:
    path = tmp_path / "plateau.yaml"
    body = {
        # More than any disk has free: every merge would cross the floor.
        "storage": {"data_dir": str(tmp_path / "data"), "min_free_disk": "1000PiB"},
        "topics": [{"source": "logs", "consolidate": {"min_age": "0s"}}],
    }
    path.write_text(yaml.safe_dump(body))
    config = load_config(path, env={})
    with open_store(config) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("logs", 0, roll=RollPolicy(max_rows=50, max_age_s=3600))
            for i in range(4):
                append_patiently(writer, "logs", 0, _batch(i * 50))
            writer.flush()
            report = consolidator_for(config, store, writer).run()
        finally:
            writer.close()
        assert (report.merged, report.deferred) == ([], 1)
        assert len(store.manifest.segments("logs")) == 4


def _api_config(tmp_path: Path, topics: list[dict[str, object]]) -> Path:
    path = tmp_path / "plateau.yaml"
    body = {
        "storage": {"data_dir": str(tmp_path / "data")},
        "kafka_api": {"listen": "127.0.0.1:0", "auto_create_topics": True},
        "topics": topics,
    }
    path.write_text(yaml.safe_dump(body))
    return path


def test_a_produced_topic_that_does_not_say_is_merged_with_the_defaults(tmp_path: Path) -> None:
    """A produced topic seals every second (86,400 segments a partition a day): left as
    sealed, every read would open them all. Consumed topics keep theirs unless asked."""
    topics = [
        {"name": "said-nothing"},
        {"name": "turned-off", "consolidate": False},
        {"name": "null-too", "consolidate": None},
        {"name": "own", "consolidate": {"min_age": "5m"}},
        {"source": "consumed"},
        {
            "name": "rolled",
            "format": "json",
            "rollups": [{"granularity": "1m", "metrics": ["count"]}],
        },
    ]
    config = load_config(_api_config(tmp_path, topics), env={})
    defaults = ConsolidateConfig()
    assert config.consolidation("said-nothing") == defaults
    assert config.consolidation("turned-off") is None
    assert config.consolidation("null-too") is None
    own = config.consolidation("own")
    assert own is not None and own.policy().min_age_s == 300.0
    assert config.consolidation("consumed") is None
    assert config.consolidation("rolled.rollup.1m") == defaults  # as its raw topic
    # A topic a producer created (auto_create_topics) is a produced topic that did not say,
    # on the Kafka API's writer; a topic no mapping names is not merged elsewhere.
    assert config.consolidation("made-by-a-producer", produced=True) == defaults
    assert config.consolidation("made-by-a-producer") is None


def test_the_kafka_apis_writer_merges_a_topic_a_producer_created(tmp_path: Path) -> None:
    config = load_config(
        _api_config(tmp_path, [{"name": "declared", "consolidate": False}]), env={}
    )
    with open_store(config) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            for topic in ("created", "declared"):
                writer.acquire(topic, 0, roll=RollPolicy(max_rows=50, max_age_s=3600))
                for i in range(4):
                    append_patiently(writer, topic, 0, _batch(i * 50))
            writer.flush()
            # Segments are merged once a minute old (the default min_age): look from later.
            later = int((time.time() + 120) * 1000)
            consume_side = consolidator_for(config, store, writer).run(now=later)
            api_side = consolidator_for(config, store, writer, produced=True).run(now=later)
        finally:
            writer.close()
    assert consume_side.merged == []
    assert [(m.topic, m.segments) for m in api_side.merged] == [("created", 4)]


@pytest.mark.parametrize(
    ("written", "rate"),
    [(None, 32 * 1024**2), ("64MiB/s", 64 * 1024**2), ("8MiB", 8 * 1024**2), ("null", None)],
)
def test_a_writers_consolidation_keeps_to_the_configured_rate(
    tmp_path: Path, written: str | None, rate: int | None
) -> None:
    """Unpaced, a pass after a busy minute of produce traffic took the cores and the disk in a
    burst: the produce rate halved meanwhile (docs/storage.md)."""
    path = _config(tmp_path, [{"source": "logs", "consolidate": {}}])
    if written is not None:
        body = yaml.safe_load(path.read_text())
        body["storage"]["consolidate_max_rate"] = yaml.safe_load(written)
        path.write_text(yaml.safe_dump(body))
    config = load_config(path, env={})
    assert config.storage.consolidate_max_rate == rate
    with open_store(config) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            assert consolidator_for(config, store, writer).pace.bytes_per_s == rate
        finally:
            writer.close()


@pytest.mark.parametrize("written", ["0", "0MiB/s", "fast", "-1MiB"])
def test_a_bad_consolidate_max_rate_names_the_key(tmp_path: Path, written: str) -> None:
    path = tmp_path / "plateau.yaml"
    path.write_text(
        yaml.safe_dump(
            {"storage": {"data_dir": str(tmp_path / "d"), "consolidate_max_rate": written}}
        )
    )
    with pytest.raises(ConfigError, match=r"storage\.consolidate_max_rate"):
        load_config(path, env={})
