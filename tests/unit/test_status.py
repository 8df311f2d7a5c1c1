"""`plateau status` over a store written without Kafka, when Kafka cannot be asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bridge.cli import main
from bridge.config import load_config
from bridge.ops.status import _listener_line, collect
from plateau_core import Store, WriterPolicy
from tests.support import batch


def _config(tmp_path: Path, **kafka: str) -> Path:
    path = tmp_path / "plateau.yaml"
    settings = {"bootstrap_servers": "127.0.0.1:1", "group_id": "g", **kafka}
    path.write_text(
        yaml.safe_dump(
            {"kafka": settings, "storage": {"data_dir": "data"}, "topics": [{"source": "t"}]}
        )
    )
    return path


def test_settings_the_kafka_client_refuses_are_named_and_the_store_still_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, **{"fetch.wait.max.ms": "soon"})
    with Store.open(tmp_path / "data") as store:
        writer = store.writer(WriterPolicy(fsync=False))
        writer.acquire("t", 0)
        writer.append("t", 0, batch(range(10)))
        writer.close()
        store_id = store.manifest.store_id()
    capsys.readouterr()  # the writer's log lines
    assert main(["status", "--config", str(config), "--json"]) == 1
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert document["topics"]["t"]["partitions"]["0"]["next_offset"] == 10
    assert document["store_id"] == store_id
    assert "fetch.wait.max.ms" in err
    assert err.startswith("plateau status: Kafka at 127.0.0.1:1 refused the client settings")


def test_kafka_not_answering_is_said_once_without_the_clients_own_lines(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # librdkafka would print a line per connection attempt (about 20 a second) on stderr
    # while status waits for its answer.
    config = load_config(_config(tmp_path))
    with Store.open(tmp_path / "data") as store:
        writer = store.writer(WriterPolicy(fsync=False))
        writer.acquire("t", 0)
        writer.append("t", 0, batch(range(10)))
        writer.close()
    capfd.readouterr()
    document, error = collect(config, timeout_s=2.0)
    assert document["topics"]["t"]["partitions"]["0"]["next_offset"] == 10
    assert error is not None and error.startswith("Kafka at 127.0.0.1:1 did not answer within 2s")
    # Lines of other tests' clients still alive in this process (another broker's address)
    # are not this command's.
    ours = [
        line
        for line in capfd.readouterr().err.splitlines()
        if "rdkafka" in line and "127.0.0.1:1/" in line
    ]
    assert ours == []


def test_a_failed_journal_is_named_on_the_listeners_line() -> None:
    body = {
        "listen": "127.0.0.1:9092",
        "journal": {"files": 1, "failed": True, "last_error": "RuntimeError: encoding fault"},
    }
    assert _listener_line(body).endswith(
        "FAILED (RuntimeError: encoding fault): produce refused until a restart"
    )
