"""plateau against a secured broker: SASL (SCRAM-SHA-256, PLAIN) over TLS and in plaintext,
and the ways a client can get security wrong.

The module runs its own local broker with SASL_SSL and SASL_PLAINTEXT listeners next to
PLAINTEXT (bridge.local_kafka.security), also when PLATEAU_TEST_BOOTSTRAP names another
broker: that one is not secured. The PLAINTEXT listener serves the test's own administration
(creating topics, reading end offsets). If the broker cannot start, every test here fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml

from bridge.demo.producer import Record, produce
from bridge.errors import BridgeError
from bridge.local_kafka import BrokerSettings, LocalKafka, free_port
from bridge.local_kafka.security import Mechanism, Protocol, SecuritySettings
from bridge.local_kafka.topics import create_topic
from bridge.ops.check import check
from tests.bridge_support import (
    REPO,
    end_offsets,
    make_config,
    plateau_command,
    running_broker,
    serving,
    wait_landed,
    wait_readyz,
)
from tests.reliability.support import Recorder, every_offset

pytestmark = pytest.mark.integration

WRONG_PASSWORD = "not-the-password-4f1d"


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """One secured broker for the module, stopped when its last test is done."""
    settings = BrokerSettings(security=SecuritySettings())
    with running_broker(tmp_path_factory.mktemp("secure-kafka"), settings) as broker:
        yield broker


def _topic(broker: LocalKafka, partitions: int) -> str:
    name = f"secure-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap_servers, name, partitions)
    return name


def _kafka_settings(
    broker: LocalKafka,
    mechanism: Mechanism = "SCRAM-SHA-256",
    protocol: Protocol = "SASL_SSL",
    **changes: str | None,
) -> tuple[str, dict[str, str]]:
    """(bootstrap servers, librdkafka security settings), with keys changed or (None) removed."""
    settings = broker.security.client_config(mechanism, protocol)
    bootstrap = settings.pop("bootstrap.servers")
    for key, value in changes.items():
        name = key.replace("_", ".")
        if value is None:
            settings.pop(name, None)
        else:
            settings[name] = value
    return bootstrap, settings


def _records(count: int, start: int = 0) -> Iterator[Record]:
    for i in range(start, start + count):
        yield Record(value=f'{{"n": {i}}}'.encode(), key=f"k{i % 17}".encode())


def _config_file(path: Path, bootstrap: str, kafka: Mapping[str, str], metrics_port: int) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": bootstrap, "group_id": "secure", **kafka},
                "storage": {"data_dir": "data"},
                "topics": [{"source": "secure-nothing"}],
                "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
                "shutdown_timeout": "10s",
            }
        )
    )
    return path


def test_serve_over_sasl_ssl_lands_every_record_exactly_once(
    secure_broker: LocalKafka, tmp_path: Path, reliability: Recorder
) -> None:
    topic = _topic(secure_broker, partitions=3)
    bootstrap, security = _kafka_settings(secure_broker)
    half = 5000
    assert produce(bootstrap, topic, _records(half), **security) == half
    data_dir = tmp_path / "data"
    config = make_config(
        bootstrap, data_dir, [{"source": topic}], group="secure-serve", kafka_extra=security
    )
    with serving(config):
        # Half of it while serve consumes, so fetches and commits over TLS overlap production.
        assert produce(bootstrap, topic, _records(half, start=half), **security) == half
        ends = end_offsets(secure_broker.bootstrap_servers, topic)
        assert sum(ends.values()) == 2 * half
        wait_landed(data_dir, topic, ends, timeout_s=90)
    reliability.check(
        "SASL_SSL + TLS",
        f"serve over SASL_SSL (SCRAM-SHA-256, broker certificate checked against the CA); "
        f"{2 * half} records produced over the same listener, half before and half while "
        "serving, into 3 partitions",
        data_dir,
        topic,
        every_offset(ends),
        recover_s=None,
    )


@pytest.mark.parametrize(
    ("mechanism", "protocol"),
    [("PLAIN", "SASL_SSL"), ("SCRAM-SHA-256", "SASL_PLAINTEXT"), ("PLAIN", "SASL_PLAINTEXT")],
)
def test_check_passes_with_each_mechanism_and_listener(
    secure_broker: LocalKafka, tmp_path: Path, mechanism: Mechanism, protocol: Protocol
) -> None:
    bootstrap, security = _kafka_settings(secure_broker, mechanism, protocol)
    config = make_config(
        bootstrap, tmp_path / "data", [{"source": "anything"}], group="g", kafka_extra=security
    )
    report = check(config, timeout_s=20)
    assert f"kafka: {bootstrap} answered (1 broker(s))" in report


def test_check_with_a_wrong_password_fails_on_authentication(
    secure_broker: LocalKafka, tmp_path: Path
) -> None:
    bootstrap, security = _kafka_settings(secure_broker, sasl_password=WRONG_PASSWORD)
    config = _config_file(tmp_path / "plateau.yaml", bootstrap, security, free_port())
    checked = plateau_command("check", "--config", str(config), log_level=None, timeout_s=60)
    output = checked.stdout + checked.stderr
    assert checked.returncode != 0, output
    # A rejected password is final: check says so at once, from the refusal, instead of
    # waiting out its timeout and reporting no answer.
    assert f"kafka: authentication failed at {bootstrap}" in checked.stderr, output
    assert "invalid credentials" in checked.stderr, output
    assert "no answer from" not in output, output
    assert WRONG_PASSWORD not in output
    assert secure_broker.security.password not in output


def test_serve_with_a_wrong_password_stays_up_unready_and_says_why(
    secure_broker: LocalKafka, tmp_path: Path
) -> None:
    port = free_port()
    # The good password sits in the file and the wrong one in the environment, which wins:
    # neither may show up anywhere.
    bootstrap, security = _kafka_settings(secure_broker)
    config = _config_file(tmp_path / "plateau.yaml", bootstrap, security, port)
    log_path = tmp_path / "serve.log"
    env = {**os.environ, "PLATEAU__KAFKA__SASL_PASSWORD": WRONG_PASSWORD}
    with log_path.open("w") as log_file:
        serve = subprocess.Popen(
            [sys.executable, "-m", "bridge.cli", "--log-level", "INFO", "serve", "-c", str(config)],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + 30
        while "_AUTHENTICATION" not in log_path.read_text() and time.monotonic() < deadline:
            assert serve.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.2)
        body = wait_readyz(port, lambda b: not b["ready"] and b["workers"] == 1, timeout_s=30)
        time.sleep(3)  # librdkafka keeps retrying; serve must ride that out, not exit
        assert serve.poll() is None, log_path.read_text()[-3000:]
        body = wait_readyz(port, lambda b: not b["ready"], timeout_s=10)
        assert body["assigned_partitions"] == 0, body
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        finally:
            if serve.poll() is None:
                serve.kill()
    log_text = log_path.read_text()
    assert serve.returncode == 0, log_text[-3000:]
    warnings = [line for line in log_text.splitlines() if '"kafka_client_error"' in line]
    assert any("_AUTHENTICATION" in line and "invalid credentials" in line for line in warnings), (
        log_text[-3000:]
    )
    assert WRONG_PASSWORD not in log_text
    assert secure_broker.security.password not in log_text


def test_client_without_the_ca_fails_the_tls_handshake(
    secure_broker: LocalKafka, tmp_path: Path
) -> None:
    bootstrap, security = _kafka_settings(secure_broker, ssl_ca_location=None)
    config = make_config(
        bootstrap, tmp_path / "data", [{"source": "anything"}], group="g", kafka_extra=security
    )
    with pytest.raises(BridgeError) as failure:
        check(config, timeout_s=15)
    message = str(failure.value)
    assert "TLS handshake failed" in message, message
    assert "certificate verify failed" in message, message
    assert secure_broker.security.password not in message


def test_plaintext_client_is_refused_by_the_sasl_ssl_listener(
    secure_broker: LocalKafka, tmp_path: Path
) -> None:
    bootstrap = secure_broker.security.sasl_ssl_bootstrap
    config = make_config(bootstrap, tmp_path / "data", [{"source": "anything"}], group="g")
    with pytest.raises(BridgeError) as failure:
        check(config, timeout_s=4)
    assert f"no answer from {bootstrap}" in str(failure.value)
    assert "security.protocol" in str(failure.value)
    # Nor can a plaintext producer write through it.
    topic = _topic(secure_broker, partitions=1)
    with pytest.raises(BridgeError, match=r"not delivered|delivery to .* failed"):
        produce(
            bootstrap,
            topic,
            _records(10),
            flush_timeout_s=15,
            **{"message.timeout.ms": 4000, "log_level": 0},
        )
    assert end_offsets(secure_broker.bootstrap_servers, topic) == {0: 0}
