"""End to end: a json topic's `id` starts as small integers and later meets a uint64 past
int64, so it lands as int64 in the first segments and as decimal(38, 0) after; the roll-up's
re-aggregated distinct counts and sums equal what the raw read gives, computed by hand."""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from bridge.config import TopicMapping
from bridge.consume.messages import records_of
from bridge.ingest.decode import decoder_for
from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.rollup import RollupPolicy, reaggregate, rollup_metrics

BASE_MS = 1_700_000_000_000
UINT64_MAX = 18446744073709551615
POLICY = RollupPolicy("1m", 60_000, (), rollup_metrics(["count", "distinct:id", "sum:n"]))
# Polls of (id, n): the widening comes in the third, and the ids of before come again after.
POLLS: list[list[tuple[int, int]]] = [
    [(1, 10), (2, 20), (3, 30), (1, 5)],
    [(2, 7), (4, 1), (5, 2)],
    [(UINT64_MAX, 3), (1, 4), (2**63, 9)],
    [(2, 8), (UINT64_MAX, 1), (6, 2), (3, 2**62)],
    [(2**63, 2**62), (7, 1)],
]


def _messages(polls: list[list[tuple[int, int]]]) -> list[list[Message]]:
    found, offset = [], 0
    for poll in polls:
        messages = []
        for ident, n in poll:
            messages.append(
                Message(
                    topic="events",
                    partition=0,
                    offset=offset,
                    value=json.dumps({"id": ident, "n": n}).encode(),
                    # 25 seconds apart: buckets span segments, segments span buckets.
                    timestamp=(TIMESTAMP_CREATE_TIME, BASE_MS + offset * 25_000),
                )
            )
            offset += 1
        found.append(messages)
    return found


def _by_hand(raw: pa.Table) -> list[dict[str, Any]]:
    buckets: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in raw.to_pylist():
        stamp = int(row["timestamp"].timestamp() * 1000)
        buckets[stamp // 60_000 * 60_000].append(row)
    return [
        {
            "count": len(rows),
            "distinct_id": float(len({r["id"] for r in rows})),
            "sum_n": sum(r["n"] for r in rows),
        }
        for _, rows in sorted(buckets.items())
    ]


def test_a_json_id_widened_to_decimal_rolls_up_as_the_raw_read_counts(tmp_path: Path) -> None:
    decoder = decoder_for(TopicMapping.model_validate({"source": "events", "format": "json"}))
    with Store.open(tmp_path / "data") as store:
        writer = store.writer(WriterPolicy(fsync=False))
        try:
            writer.acquire("events", 0, roll=RollPolicy(max_age_s=3600), rollups=(POLICY,))
            for messages in _messages(POLLS):
                decoded = decoder.decode(records_of(messages))
                assert decoded.poison == []
                for batch in decoded.batches:
                    writer.append("events", 0, batch)
                writer.flush(timeout_s=5)  # a segment a poll
        finally:
            writer.close(timeout_s=5)
        schemas = store.manifest.schemas("events").values()
        assert {str(s.field("id").type) for s in schemas} == {"int64", "decimal128(38, 0)"}
        assert len(store.manifest.segments("events")) == len(POLLS)
        assert len(store.manifest.segments("events.rollup.1m")) == len(POLLS)

        raw = store.read("events", columns=["timestamp", "id", "n"]).to_table()
        assert raw.schema.field("id").type == pa.decimal128(38, 0)
        assert set(raw.column("id").to_pylist()) == {
            Decimal(v) for v in (1, 2, 3, 4, 5, 6, 7, 2**63, UINT64_MAX)
        }
        rolled = reaggregate(store.read("events.rollup.1m").to_table(), POLICY)
        answered = rolled.select(["count", "distinct_id", "sum_n"]).to_pylist()
        wanted = _by_hand(raw)
        assert answered == wanted
        # Every bucket as one, as a query over the whole range merges them.
        rows = store.read("events.rollup.1m").to_table()
        at = rows.schema.get_field_index("timestamp")
        one = pa.array([BASE_MS] * rows.num_rows, pa.int64()).cast(rows.schema.field(at).type)
        whole = reaggregate(rows.set_column(at, "timestamp", one), POLICY)
        assert whole.column("distinct_id").to_pylist() == [9.0]
        assert whole.column("sum_n").to_pylist() == [sum(raw.column("n").to_pylist())]
