"""The Prometheus metrics of `plateau serve`, built at scrape time.

Worker figures come from the workers' status files (read by the Monitor each second), store
figures from the manifest, retention and restart counts from this process. Labels: `topic`
is always the plateau topic (what `plateau status` and queries show), `partition` the Kafka
partition. docs/operations.md lists every metric and the alerts to set on them.
"""

from __future__ import annotations

import platform
import shutil
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from bridge.config.models import Config
from bridge.consume.state import PAUSE_REASONS
from bridge.ops.api_metrics import kafka_api_families, poison_counts
from bridge.ops.monitor import Monitor
from bridge.ops.telemetry import COUNTERS, Histogram, Labels, parse_dump
from bridge.ops.worker_status import read_run
from bridge.version import version
from plateau_core import Retention, RetentionReport, SegmentState, Store

_COUNTER_HELP = {
    "records_ingested": "Records appended to plateau (decoded, not yet necessarily sealed).",
    "bytes_ingested": "Bytes of decoded Arrow data appended.",
    "seals": "Segments sealed (durable and in the manifest).",
    "sealed_bytes": "Bytes of segment files sealed.",
    "sealed_records": "Records in the segments sealed.",
    "pauses": "Times a partition was paused, by reason.",
    "paused_seconds": "Seconds partitions spent paused, by reason (summed over partitions).",
    "poison_records": "Records that did not decode, by action (dlq, skip, fail).",
    "errors": "Errors by kind.",
    "consolidations": "Runs of small segments merged into one (consolidate).",
    "consolidated_segments": "Segments consolidation removed (each merge of n removes n - 1).",
}


class ServeCounters:
    """What this (serve) process counts itself: retention and worker restarts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.retention_segments: dict[tuple[str, str], int] = defaultdict(int)
        self.retention_bytes: dict[tuple[str, str], int] = defaultdict(int)
        self.worker_restarts = 0
        self.errors: dict[str, int] = defaultdict(int)
        self.retention: Retention | None = None  # its failed passes count as errors

    def retired(self, report: RetentionReport) -> None:
        """Retention's observer: segments leave the store when they are marked."""
        with self._lock:
            for kind, group in (
                ("normal", [*report.marked, *report.global_marked]),
                ("forced", report.forced),
            ):
                for segment in group:
                    self.retention_segments[(segment.topic, kind)] += 1
                    self.retention_bytes[(segment.topic, kind)] += segment.size_bytes

    def restarted(self) -> None:
        with self._lock:
            self.worker_restarts += 1
            self.errors["worker_died"] += 1

    def error(self, kind: str) -> None:
        with self._lock:
            self.errors[kind] += 1


class ServeCollector(Collector):
    def __init__(
        self, config: Config, store: Store, monitor: Monitor, counters: ServeCounters
    ) -> None:
        self.config = config
        self.store = store
        self.monitor = monitor
        self.counters = counters

    def collect(self) -> Iterable[Metric]:
        # Read now rather than the monitor's copy: a scrape sees figures at most one worker
        # write interval (1 s) old.
        snapshots = read_run(self.monitor.data_dir, self.monitor.run)
        live = [s for s in snapshots if s.get("alive")]
        yield from self._worker_counters(snapshots)
        yield from self._partition_gauges(live)
        yield from self._worker_gauges(live)
        yield from self._store()
        yield from self._serve()
        yield from kafka_api_families(snapshots)

    # --- from the workers ---------------------------------------------------------------------

    def _worker_counters(self, snapshots: list[dict[str, Any]]) -> Iterator[Metric]:
        totals: dict[tuple[str, Labels], float] = defaultdict(float)
        seal_seconds: dict[str, Histogram] = {}
        # Dead workers' files stay for the run: their counts are part of the totals.
        for worker in snapshots:
            counters, histograms = parse_dump(worker.get("telemetry", {}))
            for key, value in counters:
                totals[key] += value
            for topic, histogram in histograms:
                seal_seconds.setdefault(topic, Histogram()).merge(histogram)
            for reason, seconds in (worker.get("pausing_s") or {}).items():
                totals[("paused_seconds", (str(reason),))] += float(seconds)
        self._add_own(totals, snapshots)
        for name in ("pauses", "paused_seconds"):  # every reason shows, 0 until it happens
            for reason in PAUSE_REASONS:
                totals.setdefault((name, (reason,)), 0.0)
        by_counter: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
        for (name, labels), value in sorted(totals.items()):
            by_counter[name].append((labels, value))
        for name, label_names in COUNTERS.items():
            family = CounterMetricFamily(
                f"plateau_{name}", _COUNTER_HELP[name], labels=list(label_names)
            )
            for labels, value in by_counter[name]:
                family.add_metric(list(labels), value)
            yield family
        durations = HistogramMetricFamily(
            "plateau_seal_duration_seconds",
            "Time from a seal's start to its manifest commit.",
            labels=["topic"],
        )
        for topic, data in sorted(seal_seconds.items()):
            durations.add_metric([topic], data.cumulative(), data.total)
        yield durations

    def _add_own(
        self, totals: dict[tuple[str, Labels], float], snapshots: list[dict[str, Any]]
    ) -> None:
        """What this process and the Kafka API listener count beside the workers."""
        for (topic, action), count in poison_counts(snapshots):
            totals[("poison_records", (topic, action))] += count
        for kind, count in self.counters.errors.items():
            totals[("errors", (kind,))] += count
        if self.counters.retention is not None and self.counters.retention.failed_passes:
            totals[("errors", ("retention_failed",))] += self.counters.retention.failed_passes

    def _partition_gauges(self, live: list[dict[str, Any]]) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        families = {
            "end": GaugeMetricFamily(
                "plateau_kafka_end_offset", "Kafka's end offset (high watermark).", labels=labels
            ),
            "committed": GaugeMetricFamily(
                "plateau_kafka_committed_offset",
                "The offset plateau last committed to Kafka (after the manifest).",
                labels=labels,
            ),
            "watermark": GaugeMetricFamily(
                "plateau_watermark_offset",
                "The manifest's next offset: everything below it is durable in plateau.",
                labels=labels,
            ),
            "consumed": GaugeMetricFamily(
                "plateau_consumed_offset",
                "The next offset the worker appends (buffered, maybe not yet sealed).",
                labels=labels,
            ),
            "lag": GaugeMetricFamily(
                "plateau_lag_records",
                "Records in Kafka not yet durable in plateau: end offset - watermark.",
                labels=labels,
            ),
            "unsealed": GaugeMetricFamily(
                "plateau_oldest_unsealed_age_seconds",
                "Age of the oldest record buffered and not yet sealed (0: none).",
                labels=labels,
            ),
            "compressed": GaugeMetricFamily(
                "plateau_partition_compressed",
                "1 while its segments are written compressed, 0 while its data does not "
                "compress (storage.compression_adaptive); absent before its first seal.",
                labels=labels,
            ),
            "paused": GaugeMetricFamily(
                "plateau_partition_paused",
                "1 while the partition is paused (reason label), else absent.",
                labels=[*labels, "reason"],
            ),
        }
        paused_by_reason: dict[str, int] = dict.fromkeys(PAUSE_REASONS, 0)
        for worker in live:
            for part in worker.get("partitions", []):
                key = [str(part["topic"]), str(part["partition"])]
                end = part.get("end_offset")
                watermark = part.get("watermark")
                base = watermark if watermark is not None else part.get("low_offset")
                if end is not None:
                    families["end"].add_metric(key, end)
                    if base is not None:
                        families["lag"].add_metric(key, max(0, end - base))
                if part.get("committed") is not None:
                    families["committed"].add_metric(key, part["committed"])
                if watermark is not None:
                    families["watermark"].add_metric(key, watermark)
                families["consumed"].add_metric(key, part["next_offset"])
                families["unsealed"].add_metric(key, part.get("unsealed_age_s") or 0.0)
                if part.get("compressed") is not None:
                    families["compressed"].add_metric(key, 1 if part["compressed"] else 0)
                if part.get("paused"):
                    reason = str(part["paused"])
                    families["paused"].add_metric([*key, reason], 1)
                    paused_by_reason[reason] = paused_by_reason.get(reason, 0) + 1
        yield from families.values()
        by_reason = GaugeMetricFamily(
            "plateau_paused_partitions", "Partitions paused now, by reason.", labels=["reason"]
        )
        for reason, count in sorted(paused_by_reason.items()):
            by_reason.add_metric([reason], count)
        yield by_reason

    def _worker_gauges(self, live: list[dict[str, Any]]) -> Iterator[Metric]:
        assigned = GaugeMetricFamily(
            "plateau_assigned_partitions", "Partitions assigned to a worker.", labels=["worker"]
        )
        connected = GaugeMetricFamily(
            "plateau_kafka_connected",
            "1 when a worker has a broker connection up.",
            labels=["worker"],
        )
        memory = GaugeMetricFamily(
            "plateau_memory_used_bytes",
            "Bytes buffered plus being sealed by a worker (bounded by memory_budget).",
            labels=["worker"],
        )
        budget = GaugeMetricFamily(
            "plateau_memory_budget_bytes", "storage.memory_budget of a worker.", labels=["worker"]
        )
        for worker in live:
            name = [str(worker.get("worker", "?"))]
            assigned.add_metric(name, len(worker.get("partitions", [])))
            connected.add_metric(name, 0 if worker.get("kafka_down") else 1)
            memory.add_metric(name, worker.get("memory", {}).get("used", 0))
            budget.add_metric(name, worker.get("memory", {}).get("budget", 0))
        yield from (assigned, connected, memory, budget)

    # --- from the manifest and this process -----------------------------------------------

    def _store(self) -> Iterator[Metric]:
        spans = self.store.spans()
        segments = GaugeMetricFamily(
            "plateau_store_segments", "Readable segments per topic.", labels=["topic"]
        )
        stored = GaugeMetricFamily(
            "plateau_store_bytes", "Bytes of readable segments per topic.", labels=["topic"]
        )
        records = GaugeMetricFamily(
            "plateau_store_records", "Records in readable segments per topic.", labels=["topic"]
        )
        replication = GaugeMetricFamily(
            "plateau_replication_lag_records",
            "Records sealed but not yet replicated: watermark - replicated_offset.",
            labels=["topic", "partition"],
        )
        per_topic: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for span in spans:
            totals = per_topic[span.topic]
            totals[0] += span.segments
            totals[1] += span.bytes
            totals[2] += span.records
            replication.add_metric(
                [span.topic, str(span.partition)],
                max(0, span.next_offset - span.replicated_offset),
            )
        for topic, (count, nbytes, rows) in sorted(per_topic.items()):
            segments.add_metric([topic], count)
            stored.add_metric([topic], nbytes)
            records.add_metric([topic], rows)
        yield from (segments, stored, records, replication)
        storage = self.config.storage
        manifest_bytes = self.store.manifest.database_bytes()
        yield GaugeMetricFamily(
            "plateau_store_footprint_bytes",
            "Bytes of readable segments plus the manifest: what storage.max_bytes bounds.",
            value=sum(t[1] for t in per_topic.values()) + manifest_bytes,
        )
        retired = self.store.manifest.segments(states=(SegmentState.DELETING,))
        yield GaugeMetricFamily(
            "plateau_store_retired_bytes",
            "Bytes of segments retired (by retention, consolidation or a released quarantine) "
            "whose files wait out storage.deletion_grace: on disk beyond the footprint.",
            value=sum(s.size_bytes for s in retired),
        )
        if storage.max_bytes is not None:
            yield GaugeMetricFamily(
                "plateau_store_max_bytes", "storage.max_bytes: the budget.", value=storage.max_bytes
            )
        yield GaugeMetricFamily(
            "plateau_disk_free_bytes",
            "Free bytes on the data_dir's filesystem.",
            value=shutil.disk_usage(storage.data_dir).free,
        )
        if storage.min_free_disk is not None:
            yield GaugeMetricFamily(
                "plateau_min_free_disk_bytes",
                "storage.min_free_disk: below it ingestion pauses.",
                value=storage.min_free_disk,
            )

    def _serve(self) -> Iterator[Metric]:
        deleted = CounterMetricFamily(
            "plateau_retention_deleted_segments",
            "Segments retention removed from the store; kind=forced: not yet replicated, "
            "removed by a hard limit.",
            labels=["topic", "kind"],
        )
        deleted_bytes = CounterMetricFamily(
            "plateau_retention_deleted_bytes",
            "Bytes of the segments retention removed.",
            labels=["topic", "kind"],
        )
        for (topic, kind), count in sorted(self.counters.retention_segments.items()):
            deleted.add_metric([topic, kind], count)
            deleted_bytes.add_metric([topic, kind], self.counters.retention_bytes[(topic, kind)])
        yield from (deleted, deleted_bytes)
        yield CounterMetricFamily(
            "plateau_worker_restarts",
            "Worker processes restarted after dying.",
            value=self.counters.worker_restarts,
        )
        build = GaugeMetricFamily(
            "plateau_build_info",
            "1, labelled with the plateau release and Python version serve runs.",
            labels=["version", "python"],
        )
        build.add_metric([version(), platform.python_version()], 1)
        yield build
        readiness = self.monitor.readiness
        yield GaugeMetricFamily(
            "plateau_ready", "1 when /readyz answers 200.", value=readiness.ready
        )
        yield GaugeMetricFamily(
            "plateau_stalled_partitions",
            "Assigned partitions that made no progress for metrics.stall_after.",
            value=len(readiness.stalled),
        )


def registry(collector: ServeCollector) -> CollectorRegistry:
    """A registry of its own (not the global one): several serves in one process (tests)
    each answer with their own figures."""
    found = CollectorRegistry(auto_describe=False)
    found.register(collector)
    ProcessCollector(registry=found)
    return found
