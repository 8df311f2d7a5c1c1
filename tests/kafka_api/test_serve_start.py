"""What serve's start does to the store before any writer takes a partition."""

from __future__ import annotations

from pathlib import Path

from bridge.allocators import TRIM_THRESHOLD
from bridge.config import parse_config
from tests.bridge_support import serve_stopped_at_once


def test_serve_start_removes_temp_files_of_a_topic_it_no_longer_writes(tmp_path: Path) -> None:
    """A seal killed half way in `old-topic`, then the config changed: no writer acquires
    its partitions any more, so only the start's sweep takes the file out of the footprint.
    The configured topic's folders are swept too, before their writer takes them."""
    data_dir = tmp_path / "data"
    stray = data_dir / "topics/old-topic/0/.00000000000000000042.arrow.tmp-0123456789ab"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"x" * 4096)
    config = parse_config(
        {
            "storage": {"data_dir": str(data_dir)},
            "kafka_api": {"listen": "127.0.0.1:0"},
            "topics": [{"name": "events", "partitions": 1}],
            "metrics": {"enabled": False},
        }
    )
    code, logs = serve_stopped_at_once(config)
    assert code == 0
    assert not stray.exists()
    removed = [e for e in logs if e["event"] == "temp_file_removed"]
    assert [(e["topic"], e["partition"], e["path"]) for e in removed] == [
        ("old-topic", 0, str(stray))
    ]


def test_serve_start_keeps_freed_buffers_for_reuse_and_says_so(tmp_path: Path) -> None:
    """Before the store opens: glibc's fixed thresholds, so the memory a seal frees is the
    next seal's instead of fresh pages (bridge/allocators.py)."""
    config = parse_config(
        {
            "storage": {"data_dir": str(tmp_path / "data")},
            "kafka_api": {"listen": "127.0.0.1:0"},
            "topics": [{"name": "events", "partitions": 1}],
            "metrics": {"enabled": False},
        }
    )
    code, logs = serve_stopped_at_once(config)
    assert code == 0
    events = [e["event"] for e in logs]
    assert events.index("allocators_tuned") < events.index("serve_started")
    tuned = next(e for e in logs if e["event"] == "allocators_tuned")
    assert tuned["trim_threshold"] == TRIM_THRESHOLD
