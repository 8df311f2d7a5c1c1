"""Which Kafka broker the test session uses, and the container one.

- default (`PLATEAU_TEST_KAFKA` unset or `jars`): Apache Kafka run from its jars on this
  machine (bridge.local_kafka), started and stopped by the session;
- `PLATEAU_TEST_KAFKA=container`: the `apache/kafka` image (the compose stack's version,
  or `PLATEAU_TEST_KAFKA_IMAGE`) run through testcontainers, on a machine with a Docker engine;
- `PLATEAU_TEST_BOOTSTRAP=host:port`: a broker that is already running.

A broker that cannot be had fails the session's Kafka tests with the reason; nothing skips.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from docker.errors import DockerException
from testcontainers.core.container import DockerContainer

from bridge.local_kafka import free_port

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "compose" / "docker-compose.yml"
Kind = Literal["jars", "container", "external"]
KINDS: tuple[Kind, ...] = ("jars", "container", "external")
STARTED = re.compile(r"Kafka Server started")


class KafkaBackendError(Exception):
    """The environment asks for a broker that cannot be had, or asks in two ways at once."""


@dataclass(frozen=True)
class KafkaBackend:
    kind: Kind
    bootstrap: str | None = None  # external only
    image: str | None = None  # container only


def compose_kafka_image() -> str:
    """The broker image of the compose stack: tests and the stack run the same Kafka."""
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return str(services["kafka"]["image"])


def choose_backend(environ: Mapping[str, str]) -> KafkaBackend:
    """The backend `environ` asks for; raises KafkaBackendError naming what is wrong."""
    requested = environ.get("PLATEAU_TEST_KAFKA", "").strip().lower()
    bootstrap = environ.get("PLATEAU_TEST_BOOTSTRAP", "").strip()
    if requested not in ("", *KINDS):
        raise KafkaBackendError(
            f"PLATEAU_TEST_KAFKA={requested!r}: expected one of {', '.join(KINDS)}"
        )
    if bootstrap:
        if requested not in ("", "external"):
            raise KafkaBackendError(
                f"PLATEAU_TEST_BOOTSTRAP names a running broker but PLATEAU_TEST_KAFKA="
                f"{requested!r} asks for another one: set only one of them"
            )
        return KafkaBackend("external", bootstrap=bootstrap)
    if requested == "external":
        raise KafkaBackendError("PLATEAU_TEST_KAFKA=external needs PLATEAU_TEST_BOOTSTRAP")
    if requested == "container":
        image = environ.get("PLATEAU_TEST_KAFKA_IMAGE", "").strip() or compose_kafka_image()
        return KafkaBackend("container", image=image)
    return KafkaBackend("jars")


def container_env(port: int) -> dict[str, str]:
    """The apache/kafka image as one KRaft node whose client listener is published on the
    same port of the host's loopback, so the address it advertises is one the tests reach."""
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENERS": f"PLAINTEXT://:{port},CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        # The tests delete and re-create topics, and produce transactionally.
        "KAFKA_DELETE_TOPIC_ENABLE": "true",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "true",
    }


@contextmanager
def container_broker(image: str, timeout_s: float = 120.0) -> Iterator[str]:
    """Run `image` for the block; yields its bootstrap address on the host's loopback.

    Raises KafkaBackendError when no Docker engine answers or the broker does not start.
    """
    port = free_port()
    try:
        container: Any = DockerContainer(image)
        for key, value in container_env(port).items():
            container.with_env(key, value)
        # Published on the host's loopback only; with_bind_ports takes no address, docker-py
        # takes (address, port).
        container.ports[f"{port}/tcp"] = ("127.0.0.1", port)
        container.start()
    except DockerException as exc:
        raise KafkaBackendError(
            f"PLATEAU_TEST_KAFKA=container needs a running Docker engine: {exc}"
        ) from exc
    try:
        _wait_started(container, timeout_s)
        yield f"127.0.0.1:{port}"
    finally:
        container.stop()


def _wait_started(container: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stdout, stderr = container.get_logs()
        if STARTED.search(stdout.decode(errors="replace") + stderr.decode(errors="replace")):
            return
        time.sleep(0.5)
    raise KafkaBackendError(f"the Kafka container did not start within {timeout_s:.0f}s")
