"""DescribeLogDirs: each produced partition's bytes on disk, as Apache Kafka's
kafka-log-dirs.sh reads them, and what a request asks for by hand."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from plateau_core import Store
from tests.kafka_api.support import RawClient, api_config, listening
from tests.kafka_api.test_tools import java_tool
from tests.kafka_api.test_topic_creation import produce

pytestmark = pytest.mark.integration

DESCRIBE_LOG_DIRS = 35


def sealed_bytes(data_dir: Path, records: int) -> dict[str, int]:
    """Each partition's bytes once `records` are sealed, by `events-N`, from the manifest."""
    deadline = time.monotonic() + 30
    with Store.open(data_dir) as store:
        while True:
            spans = store.spans("events")
            if sum(s.records for s in spans) >= records or time.monotonic() > deadline:
                return {f"events-{s.partition}": s.bytes for s in spans}
            time.sleep(0.1)


def test_kafka_log_dirs(tmp_path: Path) -> None:
    data_dir = tmp_path / "store"
    with listening(api_config(data_dir)) as (_server, bootstrap):
        produce(bootstrap, "events", 200)
        expected = sealed_bytes(data_dir, 200)
        assert sum(expected.values()) > 0
        done = java_tool(
            "org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", bootstrap, "--describe"
        )
        assert done.returncode == 0, done.stderr
        [described] = [json.loads(line) for line in done.stdout.splitlines() if line[:1] == "{"]
        [broker] = described["brokers"]
        [log_dir] = broker["logDirs"]
        assert log_dir["error"] is None
        assert log_dir["logDir"] == str(data_dir.resolve())
        assert {p["partition"]: p["size"] for p in log_dir["partitions"]} == expected


def test_what_a_request_names(tmp_path: Path) -> None:
    """The topics and partitions asked for, those that exist; null asks for every one."""
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 3}, {"name": "other", "partitions": 1}],
    )
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        try:

            def described(topics: list[dict[str, object]] | None) -> dict[str, list[int]]:
                answer = client.call(DESCRIBE_LOG_DIRS, 4, {"topics": topics})
                [result] = answer.results
                assert result.total_bytes >= result.usable_bytes > 0
                return {t.name: [p.partition_index for p in t.partitions] for t in result.topics}

            assert described(None) == {"events": [0, 1, 2], "other": [0]}
            asked = [
                {"topic": "events", "partitions": [2, 0, 7]},
                {"topic": "nobody", "partitions": [0]},
            ]
            assert described(asked) == {"events": [0, 2]}
            assert described([]) == {}
        finally:
            client.close()
