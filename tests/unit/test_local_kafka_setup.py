"""Local broker set-up that needs no broker: state files, caches, ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.errors import LocalKafkaError
from bridge.local_kafka import BrokerState, default_cache_dir, free_port, kafka_libs, processes
from bridge.local_kafka.processes import is_broker_process


def test_state_round_trip(tmp_path: Path) -> None:
    state = BrokerState(
        pid=123,
        bootstrap_servers="127.0.0.1:9092",
        controller_port=9093,
        kafka_version="4.1.2",
        started_at=1.5,
    )
    state.write(tmp_path)
    assert BrokerState.read(tmp_path) == state
    assert BrokerState.read(tmp_path / "elsewhere") is None


def test_cache_dir_follows_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PLATEAU_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == (tmp_path / "c").resolve()
    monkeypatch.delenv("PLATEAU_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == (tmp_path / "xdg" / "plateau").resolve()


def test_libs_override_must_hold_kafka(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PLATEAU_KAFKA_LIBS", str(tmp_path))
    with pytest.raises(LocalKafkaError, match=r"holds no kafka_2\.13"):
        kafka_libs()
    (tmp_path / "kafka_2.13-4.1.2.jar").write_bytes(b"")
    assert kafka_libs() == tmp_path


def test_cached_libs_are_not_fetched_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PLATEAU_KAFKA_LIBS", raising=False)
    root = tmp_path / "kafka" / "9.9.9"
    (root / "libs").mkdir(parents=True)
    (root / ".complete-with-tools").write_text("9.9.9\n")
    # No Maven on PATH: a fetch would fail, so success proves the cache was used.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert kafka_libs("9.9.9", tmp_path) == root / "libs"


def test_missing_maven_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PLATEAU_KAFKA_LIBS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(LocalKafkaError, match=r"Maven \(mvn\) is not on PATH"):
        kafka_libs("9.9.8", tmp_path)


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_free_ports_are_outside_the_ephemeral_range_and_never_handed_out_twice() -> None:
    """Outgoing connections take their ports from the kernel's ephemeral range: a port
    picked there could be taken by one before its server binds it."""
    low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(not low <= port <= high for port in ports), sorted(ports)


def test_a_port_something_listens_on_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The random pick is made to land on a port another socket listens on, first and
    second: the port after those is handed out."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([port, port])
        real = processes.random.Random.randrange
        monkeypatch.setattr(
            processes._PICK,
            "randrange",
            lambda a, b: next(picks, None) or real(processes._PICK, a, b),
        )
        assert free_port() != port
        assert next(picks, None) is None  # both taken picks were tried


def test_only_brokers_count_as_brokers() -> None:
    assert not is_broker_process(os.getpid())
    assert not is_broker_process(2**22 + 1)


def _kafka_command(work_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "bridge.cli", "kafka", "--dir", str(work_dir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_cli_names_what_is_wrong_before_starting_java(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    not_a_dir = _kafka_command(a_file, "start")
    assert not_a_dir.returncode == 2, not_a_dir.stderr
    assert "Traceback" not in not_a_dir.stderr
    assert f"plateau kafka: broker folder {a_file}: " in not_a_dir.stderr

    no_port = _kafka_command(tmp_path / "k", "start", "--port", "70000")
    assert no_port.returncode == 2
    assert "--port: 70000 is not a TCP port (1 to 65535)" in no_port.stderr

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = _kafka_command(tmp_path / "k", "start", "--port", str(port))
    assert busy.returncode == 2, busy.stderr
    assert f"port {port} on 127.0.0.1 is in use" in busy.stderr
    assert not (tmp_path / "k" / "broker.json").exists()


def test_cli_names_an_unreadable_state_file(tmp_path: Path) -> None:
    (tmp_path / "broker.json").write_text('{"pid": 12')  # cut short by a crash or a full disk
    for action in ("status", "stop", "start"):
        answer = _kafka_command(tmp_path, action)
        assert answer.returncode == 2, answer.stderr
        assert "Traceback" not in answer.stderr
        assert f"{tmp_path / 'broker.json'} cannot be read" in answer.stderr
