"""Which broker the test session uses (tests/kafka_backend.py): the choice from the
environment, the container's settings, and a clear failure without a Docker engine."""

from __future__ import annotations

import pytest

from tests.kafka_backend import (
    KafkaBackend,
    KafkaBackendError,
    choose_backend,
    compose_kafka_image,
    container_broker,
    container_env,
)


def test_default_is_the_broker_from_jars() -> None:
    assert choose_backend({}) == KafkaBackend("jars")
    assert choose_backend({"PLATEAU_TEST_KAFKA": "jars"}) == KafkaBackend("jars")
    assert choose_backend({"PLATEAU_TEST_KAFKA": " "}) == KafkaBackend("jars")


def test_container_runs_the_compose_stacks_kafka_unless_told_otherwise() -> None:
    image = compose_kafka_image()
    assert image.startswith("apache/kafka:")
    assert choose_backend({"PLATEAU_TEST_KAFKA": "container"}) == KafkaBackend(
        "container", image=image
    )
    chosen = choose_backend({"PLATEAU_TEST_KAFKA": "Container", "PLATEAU_TEST_KAFKA_IMAGE": "k:1"})
    assert chosen == KafkaBackend("container", image="k:1")


def test_a_running_broker_by_address() -> None:
    expected = KafkaBackend("external", bootstrap="h:9092")
    assert choose_backend({"PLATEAU_TEST_BOOTSTRAP": "h:9092"}) == expected
    both = {"PLATEAU_TEST_BOOTSTRAP": "h:9092", "PLATEAU_TEST_KAFKA": "external"}
    assert choose_backend(both) == expected


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"PLATEAU_TEST_KAFKA": "docker"}, "expected one of jars, container, external"),
        ({"PLATEAU_TEST_KAFKA": "external"}, "needs PLATEAU_TEST_BOOTSTRAP"),
        (
            {"PLATEAU_TEST_KAFKA": "container", "PLATEAU_TEST_BOOTSTRAP": "h:1"},
            "set only one of them",
        ),
    ],
)
def test_contradictions_are_refused(environ: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaBackendError, match=message):
        choose_backend(environ)


def test_the_container_advertises_the_port_published_on_loopback() -> None:
    env = container_env(40123)
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://127.0.0.1:40123"
    assert "PLAINTEXT://:40123" in env["KAFKA_LISTENERS"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"


def test_without_a_docker_engine_the_reason_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # An engine that cannot answer, whatever this machine has.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/plateau-test-docker.sock")
    with (
        pytest.raises(KafkaBackendError, match="needs a running Docker engine"),
        container_broker("apache/kafka:4.1.2"),
    ):
        pytest.fail("no container can start without an engine")
