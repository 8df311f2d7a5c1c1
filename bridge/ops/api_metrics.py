"""The Kafka API listener's metrics, from its status file (bridge/kafka_api/stats.py), beside
the workers' in bridge/ops/metrics.py. Every family is exported, empty or zero, whether the
listener runs or not, so dashboards and alerts never miss a series name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

ROLE = "kafka-api"

_TOTALS = {
    "throttled_requests": "Produce partitions held back because the writer was full (Kafka's "
    "quota behaviour: the connection is not read meanwhile).",
    "throttled_bytes": "Record batch bytes of the throttled produce partitions.",
    "throttle_seconds": "Seconds connections were held back, summed.",
    "duplicates": "Idempotent batches sent again and answered with their first offsets.",
}


def listener_files(snapshots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in snapshots if s.get("role") == ROLE]


def kafka_api_families(snapshots: list[dict[str, Any]]) -> Iterator[Metric]:
    listeners = listeners_bodies(snapshots)
    requests = CounterMetricFamily(
        "plateau_kafka_api_requests", "Kafka API requests, by API.", labels=["api"]
    )
    errors = CounterMetricFamily(
        "plateau_kafka_api_errors",
        "Kafka API error answers (and closed connections), by API and error.",
        labels=["api", "error"],
    )
    records = CounterMetricFamily(
        "plateau_kafka_api_records",
        "Records producers wrote to the Kafka API that are durable in the store (synced in "
        "its journal, or sealed), whatever the acks.",
        labels=["topic"],
    )
    sizes = CounterMetricFamily(
        "plateau_kafka_api_bytes", "Record batch bytes those records came in.", labels=["topic"]
    )
    failed = CounterMetricFamily(
        "plateau_kafka_api_failed_records",
        "Records the Kafka API took that the store then did not keep: refused by the writer, "
        "or cut from a failed journal (acks=0 and 1 ones had been answered).",
        labels=["topic"],
    )
    for body in listeners:
        for api, count in sorted((body.get("requests") or {}).items()):
            requests.add_metric([api], count)
        for key, count in sorted((body.get("errors") or {}).items()):
            api, _, error = key.partition(":")
            errors.add_metric([api, error], count)
        for topic, count in sorted((body.get("records") or {}).items()):
            records.add_metric([topic], count)
        for topic, count in sorted((body.get("bytes") or {}).items()):
            sizes.add_metric([topic], count)
        for topic, count in sorted((body.get("failed_records") or {}).items()):
            failed.add_metric([topic], count)
    yield from (requests, errors, records, sizes, failed)
    for name, help_text in _TOTALS.items():
        yield CounterMetricFamily(
            f"plateau_kafka_api_{name}",
            help_text,
            value=sum(float(body.get(name) or 0) for body in listeners),
        )
    yield GaugeMetricFamily(
        "plateau_kafka_api_connections",
        "Producer connections open now.",
        value=sum(int(body.get("connections") or 0) for body in listeners if body),
    )
    yield from _journal_families([body.get("journal") or {} for body in listeners])


_JOURNAL_TOTALS = {
    "syncs": "Journal writes synced to disk (each answers every acks=all request it holds).",
    "bytes_written": "Bytes written to the journal.",
    "write_failures": "Journal writes or syncs that failed and were retried in a new file; "
    "acks=all requests wait meanwhile.",
}
_JOURNAL_GAUGES = {
    "disk_bytes": "Bytes of the journal's files on disk (groups not sealed yet, and the file "
    "being written).",
    "backlog_bytes": "Bytes appended to the journal and not synced yet.",
    "failed": "1 when the journal's thread stopped on an error: every produce is refused "
    "with KAFKA_STORAGE_ERROR until a restart.",
}


def _journal_families(journals: list[dict[str, Any]]) -> Iterator[Metric]:
    for name, help_text in _JOURNAL_TOTALS.items():
        yield CounterMetricFamily(
            f"plateau_kafka_api_journal_{name}",
            help_text,
            value=sum(float(j.get(name) or 0) for j in journals),
        )
    for name, help_text in _JOURNAL_GAUGES.items():
        yield GaugeMetricFamily(
            f"plateau_kafka_api_journal_{name}",
            help_text,
            value=sum(float(j.get(name) or 0) for j in journals),
        )


def poison_counts(snapshots: list[dict[str, Any]]) -> Iterator[tuple[tuple[str, str], int]]:
    """((topic, action), count) of records produced to the listener that did not decode."""
    for body in listeners_bodies(snapshots):
        for key, count in (body.get("poison") or {}).items():
            topic, _, action = key.rpartition(":")
            yield (topic, action), int(count)


def listeners_bodies(snapshots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s.get(ROLE) or {} for s in listener_files(snapshots)]
