"""`plateau status`: per plateau topic and partition, what landed and how far behind it is."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bridge.config.models import Config
from bridge.config.naming import naming
from bridge.consume.client import ENFORCED_CONSUMER, client_config
from bridge.kafka_api.topics import served_topics
from bridge.ops import ANSWER_TIMEOUT_S
from bridge.ops.telemetry import parse_dump
from bridge.ops.worker_status import read_status_files
from bridge.store import open_store

Row = dict[str, Any]


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()
    except (ValueError, OverflowError, OSError):
        # Stored by an older version from a number that was not epoch milliseconds.
        return f"{ms} ms (outside the calendar)"


def collect(
    config: Config, timeout_s: float = ANSWER_TIMEOUT_S
) -> tuple[dict[str, Any], str | None]:
    """The status document and, if Kafka could not be asked, why.

    Kafka is asked on a thread while the manifest is read here: the round trips overlap
    with opening the manifest, which is most of the command's time.
    """
    kafka = KafkaOffsets(config, timeout_s)
    kafka.start()
    store = open_store(config)
    try:
        spans = store.spans()
        store_id = store.manifest.store_id()
        recorded = set(served_topics(config, store.manifest))
    finally:
        store.close()
    files = read_status_files(config.storage.data_dir)
    paused = {
        (p["topic"], int(p["partition"])): p["paused"]
        for worker in files
        for p in worker["partitions"]
    }
    listeners = [f["kafka-api"] for f in files if f.get("role") == "kafka-api" and "kafka-api" in f]
    rows: dict[tuple[str, int], Row] = {}
    for span in spans:
        rows[(span.topic, span.partition)] = {
            **_empty_row(),
            "next_offset": span.next_offset,
            "replicated_offset": span.replicated_offset,
            "segments": span.segments,
            "records": span.records,
            "bytes": span.bytes,
            "time_min": _iso(span.time_min),
            "time_max": _iso(span.time_max),
            "paused": paused.get((span.topic, span.partition)),
        }
    offsets, error = kafka.result()
    # Sources with no data landed yet still show up, with their whole lag.
    for key, (committed, end) in offsets.items():
        row = rows.setdefault(key, _empty_row())
        row["committed_offset"] = committed
        row["end_offset"] = end
        row["lag"] = max(0, end - row["next_offset"])
    topics: dict[str, Any] = {}
    for (topic, partition), row in sorted(rows.items()):
        topics.setdefault(topic, {"partitions": {}})["partitions"][str(partition)] = row
    for topic, body in topics.items():
        named = naming(config, topic)
        body["config"] = None if named is None else named.kind
        # The Kafka API opens the topics the manifest records as produced, but for those the
        # config listed once and no more (served_topics).
        body["kafka_api"] = config.kafka_api is not None and topic in recorded
    _add_consolidation(config, topics, files)
    document: dict[str, Any] = {"store_id": store_id, "topics": topics}
    if listeners:
        document["kafka_api"] = listeners
    return document, error


def _add_consolidation(config: Config, topics: dict[str, Any], files: list[dict[str, Any]]) -> None:
    """Each consolidated topic's policy, and the segments the running workers merged away."""
    removed: dict[str, float] = {}
    for worker in files:
        counters, _ = parse_dump(worker.get("telemetry", {}))
        for (name, labels), value in counters:
            if name == "consolidated_segments" and labels:
                removed[labels[0]] = removed.get(labels[0], 0) + value
    for topic, body in topics.items():
        # The Kafka API's writer consolidates the topics it opens (its produced topics and
        # their dead letters); a topic nothing writes to any more is consolidated by none.
        produced = body["kafka_api"] or body["config"] == "dlq"
        consolidate = config.consolidation(topic, produced=produced)
        if consolidate is None:
            continue
        policy = consolidate.policy()
        body["consolidate"] = {
            "target_bytes": policy.target_bytes,
            "merge_below_bytes": policy.small_below,
            "min_age_s": policy.min_age_s,
            "segments_removed": int(removed.get(topic, 0)),
        }


def _empty_row() -> Row:
    return {
        "next_offset": 0,
        "replicated_offset": 0,
        "committed_offset": None,
        "end_offset": None,
        "lag": None,
        "segments": 0,
        "records": 0,
        "bytes": 0,
        "time_min": None,
        "time_max": None,
        "paused": None,
    }


class KafkaOffsets:
    """The group's committed offset and the end offset of every partition of every source
    topic the configuration maps, keyed by (plateau topic, partition); asked on a thread."""

    def __init__(self, config: Config, timeout_s: float) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self._offsets: dict[tuple[str, int], tuple[int | None, int]] = {}
        self._error: str | None = None
        self._thread = threading.Thread(target=self._ask, name="status-kafka", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def result(self) -> tuple[dict[tuple[str, int], tuple[int | None, int]], str | None]:
        self._thread.join()
        return self._offsets, self._error

    def _ask(self) -> None:
        config = self.config
        if not config.consumed:  # only produced topics: no Kafka cluster to ask
            return
        try:
            consumer = Consumer(
                client_config(
                    config,
                    # librdkafka would print a line per connection attempt while Kafka does
                    # not answer; the error says why once.
                    defaults={"log_level": 0},
                    enforced={"group.id": config.kafka.group_id, **ENFORCED_CONSUMER},
                ),
            )
        except KafkaException as exc:
            self._error = (
                f"Kafka at {config.kafka.bootstrap_servers} refused the client settings: "
                f"{exc.args[0]}"
            )
            return
        try:
            metadata = consumer.list_topics(timeout=self.timeout_s)
            wanted: list[tuple[tuple[str, int], TopicPartition]] = []
            for mapping in config.consumed:
                if mapping.is_regex:
                    sources = [t for t in metadata.topics if mapping.matches(t)]
                else:
                    sources = [mapping.source]
                for source in sources:
                    info = metadata.topics.get(source)
                    for partition in info.partitions if info is not None else {}:
                        key = (mapping.plateau_topic(source), partition)
                        wanted.append((key, TopicPartition(source, partition)))
            committed = consumer.committed([tp for _, tp in wanted], timeout=self.timeout_s)
            for (key, tp), done in zip(wanted, committed, strict=True):
                _low, high = consumer.get_watermark_offsets(tp, timeout=self.timeout_s)
                self._offsets[key] = (done.offset if done.offset >= 0 else None, high)
        except KafkaException as exc:
            self._offsets = {}
            self._error = (
                f"Kafka at {config.kafka.bootstrap_servers} did not answer within "
                f"{self.timeout_s:g}s: {exc.args[0]}"
            )
        finally:
            consumer.close()


def render(document: dict[str, Any], as_json: bool) -> str:
    if as_json:
        return json.dumps(document, indent=2, sort_keys=True)
    header = (
        "topic",
        "part",
        "next_offset",
        "replicated",
        "committed",
        "end",
        "lag",
        "segments",
        "records",
        "bytes",
        "time_max",
        "paused",
    )
    lines = [header]
    for topic, body in document["topics"].items():
        for partition, row in body["partitions"].items():
            lines.append(
                (
                    topic,
                    partition,
                    *(
                        _cell(row[name])
                        for name in (
                            "next_offset",
                            "replicated_offset",
                            "committed_offset",
                            "end_offset",
                            "lag",
                            "segments",
                            "records",
                            "bytes",
                            "time_max",
                        )
                    ),
                    str(row["paused"] or "-"),
                )
            )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    table = "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines
    )
    consolidating = [
        f"consolidate {topic}: segments under {c['merge_below_bytes']:,} bytes older than "
        f"{c['min_age_s']:g} s into up to {c['target_bytes']:,} bytes; "
        f"{c['segments_removed']:,} segments merged away by this run"
        for topic, body in document["topics"].items()
        if (c := body.get("consolidate"))
    ]
    unnamed = [
        _unnamed_line(topic, body)
        for topic, body in document["topics"].items()
        if not body["config"]
    ]
    listeners = [_listener_line(body) for body in document.get("kafka_api", [])]
    return "\n".join([table, *consolidating, *unnamed, *listeners])


def _unnamed_line(topic: str, body: dict[str, Any]) -> str:
    """A topic the config does not name: what it holds, under which retention, and how to
    get rid of it (it is part of the footprint like any other)."""
    rows = body["partitions"].values()
    segments = sum(int(row["segments"]) for row in rows)
    size = sum(int(row["bytes"]) for row in rows)
    line = (
        f"not in the config: {topic}: {segments:,} segments, {size:,} bytes kept under "
        "defaults.retention"
    )
    if body["kafka_api"]:
        line += " (producers may still write to it through the Kafka API)"
    return line + "; plateau drop-topic deletes them" if segments else line


def _cell(value: object) -> str:
    """A figure the partition does not have (no source cluster, nothing sealed yet) as "-"."""
    return "-" if value is None else str(value)


def _listener_line(body: dict[str, Any]) -> str:
    records = sum(int(n) for n in (body.get("records") or {}).values())
    failed = sum(int(n) for n in (body.get("failed_records") or {}).values())
    errors = sum(int(n) for n in (body.get("errors") or {}).values())
    line = (
        f"kafka api {body.get('listen', '?')}: {body.get('connections', 0)} connections, "
        f"{records} records stored, {failed} failed, {errors} error answers, "
        f"{body.get('throttled_requests', 0)} throttled, {body.get('duplicates', 0)} duplicates"
    )
    journal = body.get("journal")
    if journal:
        line += (
            f"; journal {int(journal.get('disk_bytes') or 0):,} bytes in "
            f"{journal.get('files', 0)} files, {journal.get('write_failures', 0)} failed writes"
        )
        if journal.get("failed"):
            line += f", FAILED ({journal.get('last_error')}): produce refused until a restart"
        elif journal.get("last_error"):
            line += f" (last: {journal['last_error']})"
    return line
