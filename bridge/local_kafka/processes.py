"""Processes and ports of a local broker: free ports, whether a pid is (still) a broker,
whether it answers, and stopping it."""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import structlog
from confluent_kafka.admin import AdminClient

log = structlog.get_logger(__name__)

_PR_SET_PDEATHSIG = 1


# Where free_port looks: from here to the kernel's ephemeral range. Below are the ports
# services are usually configured on.
_LOWEST_PORT = 10_000
_EPHEMERAL_PATH = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LINUX_EPHEMERAL_LOW = 32_768
# Its own generator: a process that seeds `random` (a test) would otherwise pick the same
# ports as another process seeded alike.
_PICK = random.Random()  # noqa: S311 (a port, not a secret)
_given: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, for a server started
    next. It is picked below the kernel's ephemeral range: the kernel gives the ports of
    that range to outgoing connections and to binds to port 0, and one of those could take
    a port picked there in the seconds before its server binds it. Not handed out twice by
    one process, as its first taker may not have bound it yet."""
    low = _ephemeral_low()
    if low - _LOWEST_PORT >= 1_000:
        for _ in range(100):
            port = _PICK.randrange(_LOWEST_PORT, low)
            if port not in _given and _bindable(port):
                _given.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_PATH.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _LINUX_EPHEMERAL_LOW


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_broker_process(pid: int) -> bool:
    """True when `pid` is a running Kafka broker (guards against a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline


def broker_answers(bootstrap_servers: str, timeout_s: float = 2.0) -> bool:
    """True when the broker answers a metadata request with itself in it."""
    # log_level 0: refused connections are expected while the broker starts; keep stderr quiet.
    admin = AdminClient(
        {"bootstrap.servers": bootstrap_servers, "socket.timeout.ms": 2000, "log_level": 0}
    )
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception:  # any client error means "not answering yet"
        return False
    return len(metadata.brokers) > 0


def kill_pid(pid: int, process: subprocess.Popen[bytes] | None = None) -> None:
    """SIGKILL a broker process and wait until it is gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if process is not None:
        process.wait(timeout=10)
        return
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop_pid(pid: int, timeout_s: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Stop a broker process: SIGTERM for a clean shutdown, SIGKILL past the deadline."""

    def gone() -> bool:
        if process is not None:
            return process.poll() is not None
        return not pid_alive(pid)

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.1)
    log.warning("kafka_stop_forced", pid=pid, timeout_s=timeout_s)
    kill_pid(pid, process)


def die_with_parent() -> None:
    """Run in a child before exec: the kernel kills it when its parent dies, so a crashed
    test session or CLI leaves no broker behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
