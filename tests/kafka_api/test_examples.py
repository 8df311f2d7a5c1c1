"""examples/produce-direct and examples/secure-listener run as their READMEs say: serve on
the example's config, the example's producer, then its reader, which sees exactly what the
producer was told was stored."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bridge.local_kafka import free_port
from bridge.ops.check import check
from plateau_core import Store
from tests.bridge_support import serving
from tests.examples_support import EXAMPLES, example_config, example_module
from tests.kafka_api.support import stored


def wait_listening(address: str, timeout_s: float = 30.0) -> None:
    """Until serve's listener accepts connections (it opens the store first)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_produce_direct_reads_back_exactly_what_was_acknowledged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    produce = example_module("produce-direct/produce.py")
    read = example_module("produce-direct/read.py")
    bootstrap = f"127.0.0.1:{free_port()}"
    data_dir = tmp_path / "data"
    config = example_config(
        EXAMPLES / "produce-direct" / "plateau.yaml",
        {
            "PLATEAU__STORAGE__DATA_DIR": str(data_dir),
            "PLATEAU__KAFKA_API__LISTEN": bootstrap,
            "PLATEAU__METRICS__LISTEN": "127.0.0.1:0",
        },
    )
    started = datetime.now(UTC) - timedelta(seconds=1)
    with serving(config):
        wait_listening(bootstrap)
        delivered = produce.produce(bootstrap)
    # Serve seals everything it acknowledged before it stops.

    sent = len(produce.EVENTS) + 1 + len(produce.AUDIT_LINES)
    assert len(delivered) == sent
    acked = {(d.topic, d.partition, d.offset): d for d in delivered}
    assert len(acked) == sent
    poison = [d for d in delivered if d.value == produce.NOT_JSON]
    assert len(poison) == 1

    with Store.open(data_dir) as store:
        events = read.recent_events(store, started)
        letters = read.dead_letters(store)
        audit = read.audit(store)
        errors = read.errors_since(store, started)
        r2 = read.request(store, "r-2")
        assert read.recent_events(store, datetime.now(UTC) + timedelta(minutes=1)) == []

    # Every acknowledged JSON event once, where the producer was told, with key and headers.
    assert {(read.EVENTS_TOPIC, r["partition"], r["offset"]) for r in events} == {
        k for k, d in acked.items() if d.topic == read.EVENTS_TOPIC and d is not poison[0]
    }
    for row in events:
        record = acked[(read.EVENTS_TOPIC, row["partition"], row["offset"])]
        assert json.loads(record.value) == {
            f: row[f] for f in ("service", "level", "request_id", "latency_ms")
        }
        assert row["key"] == record.key
        assert read.headers(row) == {"request-id": row["request_id"].encode(), "attempt": b"1"}
    assert sorted(r["request_id"] for r in errors) == ["r-2", "r-3"]
    assert [r["service"] for r in r2] == ["search"]

    # The record that is not JSON: in the dead-letter topic, same partition, bytes unchanged.
    (letter,) = letters
    said = read.headers(letter)
    assert letter["value"] == produce.NOT_JSON and letter["key"] == b"checkout"
    assert letter["partition"] == poison[0].partition
    assert said["plateau.error.topic"] == read.EVENTS_TOPIC.encode()
    assert said["plateau.error.offset"] == str(poison[0].offset).encode()

    assert [(r["offset"], r["value"]) for r in audit] == list(enumerate(produce.AUDIT_LINES))
    assert all(read.headers(r) == {"source": b"auth"} for r in audit)

    # The script as a user runs it.
    assert read.main(["--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert f"{read.EVENTS_TOPIC}, last 60 minutes: {len(events)} record(s)" in out
    assert "errors: " in out and "request r-2: search" in out
    assert f"offset {poison[0].offset}: {produce.NOT_JSON!r}" in out
    assert read.main(["--data-dir", str(tmp_path / "nothing")]) == 1


def test_secure_listener_takes_its_users_to_their_topics_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = example_module("secure-listener/client.py")
    # The config beside certificates made as its comments say: tls/ next to the file.
    folder = EXAMPLES / "secure-listener"
    shutil.copy(folder / "plateau.yaml", tmp_path / "plateau.yaml")
    made = subprocess.run(
        [folder / "make-certs.sh", tmp_path / "tls", "127.0.0.1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    bootstrap = f"127.0.0.1:{free_port()}"
    env = {
        "PLATEAU__KAFKA_API__SASL__USERS__0__PASSWORD": "ingest-secret",
        "PLATEAU__KAFKA_API__SASL__USERS__1__PASSWORD": "app team's #1 secret",
        "PLATEAU__KAFKA_API__LISTEN": bootstrap,
        "PLATEAU__KAFKA_API__ADVERTISED": bootstrap,
        "PLATEAU__METRICS__LISTEN": "127.0.0.1:0",
    }
    config = example_config(tmp_path / "plateau.yaml", env)
    assert config.storage.data_dir == tmp_path / "data"
    # What the config's comments suggest running before serve.
    assert f"kafka api: TLS certificate {tmp_path / 'tls' / 'server.pem'} loads" in check(config)
    ca = tmp_path / "tls" / "ca.pem"

    def as_user(name: str, password: str) -> dict[str, object]:
        return client.client_settings(bootstrap, name, password, ca)

    with serving(config):
        wait_listening(bootstrap)
        monkeypatch.setenv("APP_TEAM_PASSWORD", "app team's #1 secret")
        assert client.main(["--bootstrap", bootstrap, "--ca-file", str(ca)]) == 0
        assert "3 record(s) stored in app-orders" in capsys.readouterr().out
        assert client.send(as_user("ingest", "ingest-secret"), "ingest-raw", [b"x"]) == [0]
        with pytest.raises(RuntimeError, match=r"(?i)topic authorization failed"):
            client.send(as_user("app-team", "app team's #1 secret"), "ingest-raw", [b"x"])
        with pytest.raises(RuntimeError, match=r"(?i)authentication"):
            client.send(as_user("app-team", "not it"), "app-orders", [b"x"])
    assert stored(tmp_path / "data", "app-orders").num_rows == 3
    assert stored(tmp_path / "data", "ingest-raw").num_rows == 1
