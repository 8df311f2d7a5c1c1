"""`plateau status`: per plateau topic and partition, what landed and how far behind it is."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bridge.config.models import Config
from bridge.kafka_client import ENFORCED_CONSUMER, client_config
from bridge.serve import open_store
from bridge.worker_status import read_status_files

Row = dict[str, Any]


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


def collect(config: Config, timeout_s: float = 10.0) -> tuple[dict[str, Any], str | None]:
    """The status document and, if Kafka could not be asked, why."""
    store = open_store(config)
    try:
        spans = store.spans()
    finally:
        store.close()
    paused = {
        (p["topic"], int(p["partition"])): p["paused"]
        for worker in read_status_files(config.storage.data_dir)
        for p in worker["partitions"]
    }
    topics: dict[str, Any] = {}
    rows: dict[tuple[str, int], Row] = {}
    for span in spans:
        rows[(span.topic, span.partition)] = {
            "next_offset": span.next_offset,
            "replicated_offset": span.replicated_offset,
            "committed_offset": None,
            "end_offset": None,
            "lag": None,
            "segments": span.segments,
            "records": span.records,
            "bytes": span.bytes,
            "time_min": _iso(span.time_min),
            "time_max": _iso(span.time_max),
            "paused": paused.get((span.topic, span.partition)),
        }
    error = _add_kafka_offsets(config, rows, timeout_s)
    for (topic, partition), row in sorted(rows.items()):
        topics.setdefault(topic, {"partitions": {}})["partitions"][str(partition)] = row
    return {"topics": topics}, error


def _add_kafka_offsets(
    config: Config, rows: dict[tuple[str, int], Row], timeout_s: float
) -> str | None:
    consumer = Consumer(
        client_config(config, enforced={"group.id": config.kafka.group_id, **ENFORCED_CONSUMER}),
        logger=None,
    )
    try:
        metadata = consumer.list_topics(timeout=timeout_s)
        # Exact sources with no data landed yet still show up, with their whole lag.
        for mapping in config.topics:
            if mapping.is_regex:
                sources = [t for t in metadata.topics if mapping.matches(t)]
            else:
                sources = [mapping.source]
            for source in sources:
                info = metadata.topics.get(source)
                for partition in info.partitions if info is not None else {}:
                    rows.setdefault(
                        (mapping.plateau_topic(source), partition),
                        {
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
                        },
                    )
        wanted: list[tuple[tuple[str, int], TopicPartition]] = []
        for topic, partition in rows:
            found = config.source_of(topic)
            if found is not None:
                wanted.append(((topic, partition), TopicPartition(found[1], partition)))
        committed = consumer.committed([tp for _, tp in wanted], timeout=timeout_s)
        for (key, tp), done in zip(wanted, committed, strict=True):
            row = rows[key]
            row["committed_offset"] = done.offset if done.offset >= 0 else None
            _low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            row["end_offset"] = high
            row["lag"] = max(0, high - row["next_offset"])
    except KafkaException as exc:
        return f"Kafka at {config.kafka.bootstrap_servers} did not answer: {exc.args[0]}"
    finally:
        consumer.close()
    return None


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
                    str(row["next_offset"]),
                    str(row["replicated_offset"]),
                    str(row["committed_offset"]),
                    str(row["end_offset"]),
                    str(row["lag"]),
                    str(row["segments"]),
                    str(row["records"]),
                    str(row["bytes"]),
                    str(row["time_max"]),
                    str(row["paused"] or "-"),
                )
            )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines
    )
