"""Integers beyond int64 in an inferred json topic consumed from Kafka land exact as
decimal(38, 0); beyond 38 digits the field is a double, and the log names the topic,
partition, offset and field."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import structlog
from structlog.testing import capture_logs

from bridge.demo.producer import Record, produce
from tests.bridge_support import end_offsets, make_config, serving, stored, wait_landed

UINT64_MAX = 2**64 - 1


def test_uint64_ids_land_exact_and_a_longer_integer_is_logged(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    events = [
        {"seq": 0, "id": 1, "huge": 1},
        {"seq": 1, "id": UINT64_MAX, "huge": 10**40},
        {"seq": 2, "id": 2**63 + 1, "huge": 2},
    ]
    produce(kafka, topic, [Record(value=json.dumps(e).encode(), partition=1) for e in events])
    config = make_config(kafka, tmp_path, [{"source": topic, "format": "json"}], group=f"g-{topic}")
    contextual = [structlog.contextvars.merge_contextvars]
    with capture_logs(processors=contextual) as logged, serving(config):
        wait_landed(tmp_path, topic, end_offsets(kafka, topic))
    table = stored(tmp_path, topic)
    assert table.schema.field("id").type == pa.decimal128(38, 0)
    assert table.schema.field("huge").type == pa.float64()
    by_seq = {r["seq"]: r for r in table.to_pylist()}
    assert [by_seq[s]["id"] for s in range(3)] == [
        Decimal(1),
        Decimal(UINT64_MAX),
        Decimal(2**63 + 1),
    ]
    assert by_seq[1]["huge"] == 1e40
    rounded = [e for e in logged if e["event"] == "json_integer_rounded"]
    assert [(e["topic"], e["partition"], e["offset"], e["field"]) for e in rounded] == [
        (topic, 1, 1, "huge")
    ]
