"""Secrets from the config file or the environment never reach logs, `check`, `status` or
error messages, whatever the commands go through (here: brokers that do not answer)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.bridge_support import REPO, plateau_command

FILE_SECRET = "kafka-FILE-secret-7c1e"
ENV_SECRET = "kafka-ENV-secret-93ab"
S3_SECRET = "s3-FILE-secret-55d0"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_secrets_stay_out_of_every_output(tmp_path: Path) -> None:
    config = tmp_path / "plateau.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {
                    "bootstrap_servers": f"127.0.0.1:{_closed_port()}",
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "plateau",
                    "sasl.password": FILE_SECRET,
                },
                "storage": {"data_dir": "data"},
                "topics": [{"source": "t"}],
                "replication": {"s3": {"secret_access_key": S3_SECRET}},
                "metrics": {"listen": "127.0.0.1:0"},
                "shutdown_timeout": "5s",
            }
        )
    )
    env = {**os.environ, "PLATEAU__KAFKA__SASL_PASSWORD": ENV_SECRET}
    outputs = {}
    # The brokers never answer: a short wait for them is enough to reach the error paths.
    check = plateau_command(
        "check", "--config", str(config), "--timeout", "2s", env=env, log_level=None, timeout_s=60
    )
    assert check.returncode != 0, "check must fail when the brokers do not answer"
    outputs["check"] = check.stdout + check.stderr
    status = plateau_command(
        *("status", "--config", str(config), "--json", "--timeout", "2s"),
        env=env,
        log_level=None,
        timeout_s=60,
    )
    outputs["status"] = status.stdout + status.stderr
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log_file:
        serve = subprocess.Popen(
            [
                *(sys.executable, "-m", "bridge.cli", "--log-level", "DEBUG"),
                *("serve", "-c", str(config)),
            ],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        # Until a failed connection attempt is logged: the error path is what could leak.
        deadline = time.monotonic() + 60
        while "kafka_client_error" not in log_path.read_text():
            assert serve.poll() is None, log_path.read_text()[-2000:]
            assert time.monotonic() < deadline, log_path.read_text()[-2000:]
            time.sleep(0.2)
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        finally:
            if serve.poll() is None:
                serve.kill()
    outputs["serve"] = log_path.read_text()
    assert serve.returncode == 0, outputs["serve"][-2000:]
    for name, text in outputs.items():
        for secret in (FILE_SECRET, ENV_SECRET, S3_SECRET):
            assert secret not in text, f"{name} printed a secret"
