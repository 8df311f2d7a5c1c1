"""The collector on a real store with worker status files: its figures, and that
docs/operations.md and docs/prometheus-alerts.yml name exactly the metrics it exports."""

from __future__ import annotations

import platform
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.core import Metric

from bridge.config import Config, parse_config
from bridge.consume.state import PAUSE_REASONS
from bridge.ops.api_metrics import kafka_api_families
from bridge.ops.metrics import ServeCollector, ServeCounters, registry
from bridge.ops.monitor import Monitor
from bridge.ops.telemetry import COUNTERS, WorkerTelemetry
from bridge.ops.worker_status import StatusFile, new_run_id
from bridge.store import retention_for
from bridge.version import version
from plateau_core import Store
from tests.support import BASE_MS, HOUR_MS, fill_segments

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _config(data_dir: Path) -> Config:
    return parse_config(
        {
            "storage": {"data_dir": str(data_dir), "max_bytes": "1GiB", "min_free_disk": "1MiB"},
            "topics": [
                {"source": "t", "retention": {"require_replicated": True}},
                {"source": "loose"},
            ],
        }
    )


def _listener_file(data_dir: Path, run: str) -> None:
    StatusFile(data_dir, "kafka-api", run).write(
        {
            "worker": "kafka-api",
            "role": "kafka-api",
            "partitions": [],
            "kafka-api": {
                "connections": 2,
                "requests": {"Produce": 7},
                "errors": {"Produce:corrupt_message": 1},
                "records": {"p": 70},
                "bytes": {"p": 7000},
                "failed_records": {"p": 4},
                "poison": {"p:skip": 3},
                "throttled_requests": 4,
                "throttled_bytes": 400,
                "throttle_seconds": 0.5,
                "duplicates": 1,
                "journal": {
                    "syncs": 5,
                    "bytes_written": 9000,
                    "write_failures": 1,
                    "disk_bytes": 4096,
                    "backlog_bytes": 0,
                },
            },
        }
    )


def _worker_file(data_dir: Path, run: str) -> None:
    telemetry = WorkerTelemetry()
    for name, labels in COUNTERS.items():
        values = {"topic": "t", "partition": "0", "reason": "memory_budget"}
        values |= {"action": "dlq", "kind": "seal_failed"}
        telemetry.add(name, tuple(values[label] for label in labels), 2)
    telemetry.sealed("t", 0, 10, 100, 0.02)
    part = {
        "source": "t",
        "topic": "t",
        "partition": 0,
        "next_offset": 40,
        "watermark": None,  # nothing sealed by this worker yet: lag counts from Kafka's start
        "committed": 30,
        "low_offset": 5,
        "end_offset": 45,
        "paused": "memory_budget",
        "unsealed_age_s": 1.5,
        "max_age_s": 10.0,
    }
    StatusFile(data_dir, "worker-0", run).write(
        {
            "worker": "worker-0",
            "partitions": [part],
            "memory": {"used": 10, "budget": 100},
            "telemetry": telemetry.dump(),
            "pausing_s": {"memory_budget": 3.0},
        }
    )


@pytest.fixture
def exported(tmp_path: Path) -> dict[str, Metric]:
    config = _config(tmp_path)
    run = new_run_id()
    with Store.open(tmp_path) as store:
        fill_segments(store, 0, 4)
        fill_segments(store, 0, 2, topic="loose")
        size = store.manifest.segments("t")[0].size_bytes
        manifest_bytes = sum(p.stat().st_size for p in store.manifest.database_files())
        counters = ServeCounters()
        hard_limit = config.storage.model_copy(
            update={"max_bytes": manifest_bytes + size * 3, "deletion_grace": 0}
        )
        retention = retention_for(
            config.model_copy(update={"storage": hard_limit}), store, counters.retired
        )
        retention.run(now=BASE_MS + 6 * HOUR_MS)
        # One more retired, its file kept for the grace: on disk, outside the footprint.
        store.manifest.mark_deleting([store.manifest.segments("t")[0].id])
        counters.restarted()
        _worker_file(tmp_path, run)
        _listener_file(tmp_path, run)
        monitor = Monitor(tmp_path, run, stall_after_s=60)
        monitor.check()
        collector = ServeCollector(config, store, monitor, counters)
        registry(collector)  # registering collects once: names must be unique
        return {family.name: family for family in collector.collect()}


def _sample(families: dict[str, Metric], name: str, **labels: str) -> float:
    for family in families.values():
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"no sample {name}{labels}")


def _exported_names(families: dict[str, Metric]) -> set[str]:
    return {f"{n}_total" if f.type == "counter" else n for n, f in families.items()}


def test_collector_figures(exported: dict[str, Metric]) -> None:
    labels = {"topic": "t", "partition": "0"}
    assert _sample(exported, "plateau_records_ingested_total", **labels) == 2
    assert _sample(exported, "plateau_lag_records", **labels) == 40  # end 45 - low 5
    assert _sample(exported, "plateau_kafka_committed_offset", **labels) == 30
    # The counter (2 s) plus the pause still running (3 s).
    assert _sample(exported, "plateau_paused_seconds_total", reason="memory_budget") == 5
    assert _sample(exported, "plateau_paused_partitions", reason="memory_budget") == 1
    assert _sample(exported, "plateau_paused_partitions", reason="disk_full") == 0
    assert _sample(exported, "plateau_seal_duration_seconds_count", topic="t") == 1
    # "loose" gave up its two segments normally; only then was one of "t" forced.
    deleted = "plateau_retention_deleted_segments_total"
    assert _sample(exported, deleted, topic="loose", kind="normal") == 2
    assert _sample(exported, deleted, topic="t", kind="forced") == 1
    assert _sample(exported, "plateau_store_segments", topic="t") == 2
    size = _sample(exported, "plateau_store_bytes", topic="t") / 2
    assert _sample(exported, "plateau_store_retired_bytes") == size
    assert _sample(exported, "plateau_replication_lag_records", **labels) == 40
    assert _sample(exported, "plateau_worker_restarts_total") == 1
    assert _sample(exported, "plateau_errors_total", kind="worker_died") == 1
    assert _sample(exported, "plateau_errors_total", kind="seal_failed") == 2
    assert _sample(exported, "plateau_ready") == 1
    build = exported["plateau_build_info"].samples
    assert [(s.name, s.value) for s in build] == [("plateau_build_info", 1)]
    assert build[0].labels == {"version": version(), "python": platform.python_version()}
    assert version() != "unknown"  # installed: the package's metadata names it
    assert _sample(exported, "plateau_store_max_bytes") == 1024**3
    assert _sample(exported, "plateau_kafka_api_requests_total", api="Produce") == 7
    assert (
        _sample(exported, "plateau_kafka_api_errors_total", api="Produce", error="corrupt_message")
        == 1
    )
    assert _sample(exported, "plateau_kafka_api_records_total", topic="p") == 70
    assert _sample(exported, "plateau_kafka_api_failed_records_total", topic="p") == 4
    assert _sample(exported, "plateau_kafka_api_throttled_requests_total") == 4
    assert _sample(exported, "plateau_kafka_api_connections") == 2
    assert _sample(exported, "plateau_kafka_api_journal_syncs_total") == 5
    assert _sample(exported, "plateau_kafka_api_journal_write_failures_total") == 1
    assert _sample(exported, "plateau_kafka_api_journal_disk_bytes") == 4096
    assert _sample(exported, "plateau_poison_records_total", topic="p", action="skip") == 3


def test_a_failed_journal_is_a_gauge_of_one() -> None:
    body = {"journal": {"failed": True, "last_error": "RuntimeError: encoding fault"}}
    families = {
        family.name: family
        for family in kafka_api_families([{"role": "kafka-api", "kafka-api": body}])
    }
    assert _sample(families, "plateau_kafka_api_journal_failed") == 1


def test_operations_doc_lists_exactly_the_exported_metrics(exported: dict[str, Metric]) -> None:
    text = (DOCS / "operations.md").read_text()
    table = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(plateau_[a-z_]+)` \|", table, re.MULTILINE))
    assert documented == _exported_names(exported)


def test_operations_doc_names_exactly_the_pause_reasons() -> None:
    """The reason label's values are what alerts select on: the documented ones are the
    typed ones, and those are the ones they always were."""
    text = (DOCS / "operations.md").read_text()
    paragraph = text.split("Pause reasons: ", 1)[1].split("\n\n", 1)[0]
    documented = re.findall(r"`([a-z_]+)` \(", paragraph)
    assert documented == list(PAUSE_REASONS)
    assert PAUSE_REASONS == ("partition_busy", "memory_budget", "disk_full", "schema_registry")


def test_alert_rules_use_exported_metrics(exported: dict[str, Metric]) -> None:
    rules = yaml.safe_load((DOCS / "prometheus-alerts.yml").read_text())
    names = _exported_names(exported)
    histogram_series = {
        f"{n}{suffix}"
        for n, f in exported.items()
        if f.type == "histogram"
        for suffix in ("_bucket", "_sum", "_count")
    }
    used = {
        name
        for group in rules["groups"]
        for rule in group["rules"]
        for name in re.findall(r"plateau_[a-z_]+", rule["expr"])
    }
    assert used, "no rule uses a plateau metric"
    assert used <= names | histogram_series, used - names - histogram_series
