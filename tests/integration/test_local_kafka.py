"""The local broker's lifecycle: restart on the same port with the same data, the CLI, failures."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient
from structlog.testing import capture_logs

from bridge.config import parse_config
from bridge.errors import LocalKafkaError
from bridge.local_kafka import LocalKafka
from bridge.local_kafka import broker as broker_module
from bridge.local_kafka.processes import broker_answers, free_port, is_broker_process, pid_alive
from bridge.local_kafka.topics import create_topic
from bridge.ops.check import check

pytestmark = pytest.mark.integration


def test_restart_keeps_port_and_data(tmp_path: Path) -> None:
    broker = LocalKafka(tmp_path / "kafka", tie_to_parent=True)
    try:
        first = broker.start()
        pid = broker.pid
        assert pid is not None
        create_topic(first, "survives-restart", 2)
        broker.stop()
        assert not pid_alive(pid), "the broker process is still there after stop()"

        second = broker.start()
        assert second == first
        topics = AdminClient({"bootstrap.servers": second}).list_topics(timeout=20).topics
        assert len(topics["survives-restart"].partitions) == 2
        # kill(), for a broker thrown away with its data (the test session's): gone at once.
        pid = broker.pid
        assert pid is not None
        broker.kill()
        assert not pid_alive(pid), "the broker process is still there after kill()"
        assert not (tmp_path / "kafka" / "broker.json").exists()
    finally:
        broker.stop()
    assert broker.pid is None


def test_cli_start_status_stop(tmp_path: Path) -> None:
    work_dir = tmp_path / "cli-kafka"

    def plateau(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "bridge.cli", "kafka", "--dir", str(work_dir), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)

    started = plateau("start")
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip().splitlines()[-1]
    assert bootstrap.startswith("127.0.0.1:")
    state = (work_dir / "broker.json").read_text()
    try:
        status = plateau("status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"running: {bootstrap}" in status.stdout
        assert plateau("start").stdout.startswith("already running")
    finally:
        stopped = plateau("stop")
    assert stopped.returncode == 0, stopped.stderr
    pid = int(stopped.stdout.split("pid ")[1].rstrip(")\n"))
    assert f'"pid": {pid}' in state
    assert not is_broker_process(pid), "a java broker process survived `plateau kafka stop`"
    after = plateau("status")
    assert after.returncode == 1
    assert after.stdout.strip() == "not running"


def test_start_failure_reports_the_broker_log(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = LocalKafka(tmp_path / "kafka", port=port, tie_to_parent=True)
        with pytest.raises(LocalKafkaError) as failure:
            broker.start()
    message = str(failure.value)
    assert "exited with code" in message
    assert "broker.log" in message or "broker.stdout" in message
    assert "Address already in use" in message
    assert broker.pid is None


def test_a_picked_port_taken_before_the_broker_binds_it_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port picked for the broker is taken (by another process) before it binds it: the
    start goes on on other ports, and says so."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([port])
        monkeypatch.setattr(broker_module, "free_port", lambda: next(picks, None) or free_port())
        broker = LocalKafka(tmp_path / "kafka", tie_to_parent=True)
        try:
            with capture_logs() as logs:
                bootstrap = broker.start()
            assert broker.port != port
            assert broker_answers(bootstrap)
        finally:
            broker.kill()
    (retried,) = [e for e in logs if e["event"] == "kafka_port_taken"]
    assert retried["ports"][0] == port and retried["attempt"] == 1


def test_a_second_failed_start_reports_its_own_failure(tmp_path: Path) -> None:
    """The broker's log is kept across starts; the error shown is the one of this start, and
    no state file claims a broker that never came up."""
    ports = []
    for _ in range(2):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            ports.append(port)
            broker = LocalKafka(tmp_path / "kafka", port=port, tie_to_parent=True)
            with pytest.raises(LocalKafkaError) as failure:
                broker.start()
        assert not (tmp_path / "kafka" / "broker.json").exists()
    message = str(failure.value)
    assert f"127.0.0.1:{ports[1]}: Address already in use" in message
    assert f"127.0.0.1:{ports[0]}" not in message


def test_session_broker_is_tied_to_this_process(kafka_broker: LocalKafka | None) -> None:
    if kafka_broker is None:
        pytest.fail(
            "this test checks the local broker; unset PLATEAU_TEST_BOOTSTRAP and PLATEAU_TEST_KAFKA"
        )
    pid = kafka_broker.pid
    assert pid is not None and is_broker_process(pid)
    # The broker runs in its own session, so a Ctrl-C at the terminal does not reach it
    # before the fixture stops it cleanly.
    assert os.getsid(pid) != os.getsid(0)


def test_cli_secure_start_survives_a_restart(tmp_path: Path) -> None:
    work_dir = tmp_path / "secure-kafka"

    def plateau(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "bridge.cli", "kafka", "--dir", str(work_dir), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)

    def secured_check() -> list[str]:
        snippet = yaml.safe_load((work_dir / "security" / "plateau-kafka.yaml").read_text())
        config = parse_config(
            {
                "kafka": snippet["kafka"],
                "storage": {"data_dir": str(tmp_path / "data")},
                "topics": [{"source": "anything"}],
            }
        )
        return check(config, timeout_s=20)

    try:
        started = plateau("start", "--secure")
        assert started.returncode == 0, started.stderr
        assert "SASL_SSL: 127.0.0.1:" in started.stdout
        assert stat.S_IMODE((work_dir / "security" / "plateau-kafka.yaml").stat().st_mode) == 0o600
        assert "SASL_SSL 127.0.0.1:" in plateau("status").stdout
        ca = (work_dir / "security" / "ca.pem").read_bytes()
        assert any(line.endswith("answered (1 broker(s))") for line in secured_check())
        assert plateau("stop").returncode == 0

        # The SCRAM user lives in the formatted metadata: a restart must keep its password
        # (and the CA clients already trust), whatever ports it gets this time.
        again = plateau("start", "--secure")
        assert again.returncode == 0, again.stderr
        assert (work_dir / "security" / "ca.pem").read_bytes() == ca
        assert any(line.endswith("answered (1 broker(s))") for line in secured_check())
    finally:
        plateau("stop")
