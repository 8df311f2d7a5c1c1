"""`plateau serve` with only produced topics: the listener runs without any Kafka cluster,
and status, /metrics and /readyz cover it."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from sqlalchemy.exc import OperationalError
from structlog.testing import capture_logs

from bridge import serve as serve_module
from bridge.kafka_api import server as server_module
from bridge.local_kafka import free_port
from bridge.local_kafka.security import SecuritySettings, prepare
from bridge.store import open_store
from tests.bridge_support import get, plateau_command, serving, wait_readyz, with_metrics
from tests.kafka_api.support import api_config, listening, stored


def test_serve_runs_the_listener_alone_and_reports_it(tmp_path: Path) -> None:
    api_port, metrics_port = free_port(), free_port()
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 2, "format": "json", "on_error": "skip"}],
        listen=f"127.0.0.1:{api_port}",
    )
    config = with_metrics(config, metrics_port)
    config_file = tmp_path / "plateau.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True)))
    with serving(config):
        ready = wait_readyz(metrics_port, lambda body: body["ready"])
        assert ready["assigned_partitions"] == 2
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{api_port}", "acks": "all"})
        for i in range(100):
            producer.produce("events", value=json.dumps({"n": i}).encode())
        producer.produce("events", value=b"not json")
        assert producer.flush(30) == 0
        # The listener's status file is rewritten every second.
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline:
            _, text = get(metrics_port, "/metrics")
            if 'plateau_kafka_api_records_total{topic="events"} 101.0' in text:
                break
            time.sleep(0.3)
        assert 'plateau_kafka_api_records_total{topic="events"} 101.0' in text
        # The status file was rewritten since the listener started: so were the threads'
        # names the kernel shows (top -H, ps -L).
        kernel = {
            Path(f"/proc/self/task/{t.native_id}/comm").read_text().strip()
            for t in threading.enumerate()
            if t.name in ("kafka-api", "journal")
        }
        assert kernel == {"kafka-api", "journal"}
        assert re.search(r'plateau_kafka_api_requests_total\{api="Produce"\} [1-9]', text)
        assert 'plateau_poison_records_total{action="skip",topic="events"} 1.0' in text
        status = plateau_command("status", "--config", str(config_file), "--json")
        assert status.returncode == 0, status.stderr
        document = json.loads(status.stdout)
        assert document["kafka_api"][0]["records"] == {"events": 101}
        partitions = document["topics"]["events"]["partitions"]
        assert sum(p["records"] for p in partitions.values()) == 100
        table = plateau_command("status", "--config", str(config_file))
        assert f"kafka api 127.0.0.1:{api_port}: " in table.stdout
        # A produced topic has no source cluster: its committed, end and lag are "-".
        rows = [line.split() for line in table.stdout.splitlines() if line.startswith("events ")]
        assert rows, table.stdout
        assert all(row[4:7] == ["-", "-", "-"] for row in rows), table.stdout
    assert stored(tmp_path / "store", "events").num_rows == 100


def test_demo_direct_lands_every_event_without_a_broker(tmp_path: Path) -> None:
    done = plateau_command(
        "demo", "--direct", "--seconds", "1", "--rate", "2000", "--data-dir", str(tmp_path / "d")
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "plateau's Kafka API at 127.0.0.1:" in done.stdout
    assert "every produced event landed exactly once (2000 records)" in done.stdout
    # No broker, so nothing is consumed: the progress lines count what the listener took.
    progress = [line for line in done.stdout.splitlines() if " s  " in line and "sealed" in line]
    assert progress, done.stdout[-2000:]
    assert all(" received " in line and "consumed" not in line for line in progress)


def test_check_needs_no_cluster_for_produced_topics_and_names_a_taken_port(
    tmp_path: Path,
) -> None:
    import socket  # noqa: PLC0415

    import pytest  # noqa: PLC0415

    from bridge.errors import BridgeError  # noqa: PLC0415
    from bridge.ops.check import check  # noqa: PLC0415

    port = free_port()
    config = api_config(tmp_path / "store", listen=f"127.0.0.1:{port}")
    report = check(config, timeout_s=2)
    assert f"kafka api: 127.0.0.1:{port} is free" in report
    assert "kafka: no topic is consumed, so no cluster is needed" in report
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with pytest.raises(BridgeError, match=r"kafka_api.listen 127.0.0.1:\d+ cannot be bound"):
            check(config, timeout_s=2)


def test_a_failed_producer_sweep_keeps_the_listener_reporting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest write that fails once (a lock held past the busy timeout, a database
    restarting) must not end the status file /readyz and /metrics read, nor later sweeps."""
    monkeypatch.setattr(server_module, "PRODUCER_SWEEP_S", 0.0)
    sweeps: list[int] = []

    def locked(before_ms: int) -> int:
        sweeps.append(before_ms)
        if len(sweeps) == 1:
            raise OperationalError("UPDATE producer_states", {}, Exception("database is locked"))
        return 0

    with listening(api_config(tmp_path / "store")) as (server, _):
        monkeypatch.setattr(server.store.manifest, "expire_producers", locked)
        deadline = time.monotonic() + 30
        while len(sweeps) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        status = next((tmp_path / "store" / "run").glob("*.kafka-api.json"))
        assert len(sweeps) >= 3, "the sweep was not tried again after it failed"
        written = json.loads(status.read_text())["updated_at"]
        while time.monotonic() < deadline:
            if json.loads(status.read_text())["updated_at"] > written:
                break
            time.sleep(0.2)
        assert json.loads(status.read_text())["updated_at"] > written


@pytest.mark.parametrize("tls", [False, True], ids=["in-clear", "over-tls"])
def test_sasl_plain_without_tls_is_served_with_a_warning(tmp_path: Path, tls: bool) -> None:
    material = prepare(tmp_path / "tls", SecuritySettings())
    pem = str(material.broker_pem)
    config = api_config(
        tmp_path / "store",
        sasl={"mechanisms": ["PLAIN"], "users": [{"name": "u", "password": "secret-1"}]},
        **({"tls": {"certfile": pem, "keyfile": pem}} if tls else {}),
    )
    store = open_store(config)
    try:
        with capture_logs() as logs:
            listener = serve_module._start_listener(config, store, "serve-test-0")
        assert listener is not None
        listener.stop(5)
    finally:
        store.close()
    warned = [e for e in logs if e["event"] == "kafka_api_plain_without_tls"]
    assert len(warned) == (0 if tls else 1)
