"""The Kafka API's writer follows `storage.compression_adaptive` as the consume workers do: a
produced partition whose data does not compress is written uncompressed, unless it is turned
off; /metrics shows the partition's mode."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bridge.config import Config, parse_config
from bridge.local_kafka import free_port
from plateau_core import Store
from tests.bridge_support import get, serving, with_metrics

# Arrow writes every lz4-compressed buffer as an LZ4 frame, which starts with this magic
# number; 4 fixed bytes practically never appear in a few MiB of random letters.
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
LETTERS = bytes(65 + i % 26 for i in range(256))
RECORDS = 3000  # of 1 KiB: a sample (1 MiB) and more, sealed in several segments


def config_for(data_dir: Path, api_port: int, metrics_port: int, adaptive: bool) -> Config:
    config = parse_config(
        {
            "storage": {
                "data_dir": str(data_dir),
                "compression": "lz4",
                "compression_adaptive": adaptive,
            },
            "kafka_api": {"listen": f"127.0.0.1:{api_port}", "durability": "segment"},
            "topics": [{"name": "blobs", "partitions": 1}],
            "shutdown_timeout": "20s",
        }
    )
    return with_metrics(config, metrics_port)


@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive", "always-lz4"])
def test_produced_incompressible_data_follows_compression_adaptive(
    tmp_path: Path, adaptive: bool
) -> None:
    api_port, metrics_port = free_port(), free_port()
    config = config_for(tmp_path / "store", api_port, metrics_port, adaptive)
    data = random.Random(7).randbytes(RECORDS * 1024).translate(LETTERS)
    paused = 'plateau_partition_compressed{partition="0",topic="blobs"} 0.0'
    with serving(config):
        producer = Producer(
            {"bootstrap.servers": f"127.0.0.1:{api_port}", "acks": "all", "linger.ms": 0}
        )
        for i in range(RECORDS):
            producer.produce("blobs", value=data[i * 1024 : (i + 1) * 1024], partition=0)
            if i % 300 == 299:  # several requests, so several segments
                assert producer.flush(30) == 0
        assert producer.flush(30) == 0
        # The listener's status file, which /metrics reads, is rewritten every second.
        deadline = time.monotonic() + (10 if adaptive else 3)
        text = ""
        while time.monotonic() < deadline and paused not in text:
            _, text = get(metrics_port, "/metrics")
            time.sleep(0.3)
        assert (paused in text) is adaptive
    store = Store.open(tmp_path / "store")
    try:
        segments = store.manifest.segments("blobs")
        modes = [LZ4_FRAME_MAGIC in store.segment_path(s).read_bytes() for s in segments]
        assert sum(s.record_count for s in segments) == RECORDS
    finally:
        store.close()
    assert len(modes) > 2
    # The first segments are the sample, compressed; adaptive, the last are not.
    assert modes[0]
    assert modes[-1] is (not adaptive)
