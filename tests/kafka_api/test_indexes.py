"""A produced topic's index and roll-ups reach the listener's writer: bloom filters in its
segments, its roll-up topic sealed with it."""

from __future__ import annotations

import json
from pathlib import Path

from kio.schema.errors import ErrorCode

from plateau_core import Store
from tests.kafka_api.support import RawClient, api_config, listening, produce_body, record_batch

PRODUCE = 0


def test_produced_topic_gets_its_blooms_and_rollups(tmp_path: Path) -> None:
    topic = {
        "name": "events",
        "partitions": 1,
        "format": "json",
        "index": {"bloom": ["rid"]},
        "rollups": [{"granularity": "1m", "dimensions": ["svc"], "metrics": ["count"]}],
    }
    config = api_config(tmp_path / "store", [topic])
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        for i in range(3):
            values = [json.dumps({"rid": f"r{i}-{j}", "svc": "api"}).encode() for j in range(4)]
            answer = client.call(PRODUCE, 9, produce_body("events", 0, record_batch(values)))
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        client.close()
    with Store.open(tmp_path / "store") as store:
        segments = store.manifest.segments("events")
        assert set(store.manifest.blooms("events", ["rid"])) == {s.id for s in segments}
        rolled = store.read("events.rollup.1m").to_table()
        assert sum(rolled.column("count").to_pylist()) == 12
        assert store.read("events", where={"rid": "r1-2"}).to_table().num_rows == 1
