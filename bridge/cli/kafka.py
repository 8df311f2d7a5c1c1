"""`plateau kafka fetch|start|stop|status`: the local broker for people at a terminal."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.local_kafka.jars import DEFAULT_KAFKA_VERSION

if TYPE_CHECKING:
    from bridge.local_kafka.broker import BrokerSettings, BrokerState
    from bridge.local_kafka.security import SecureEndpoints


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "kafka",
        help="run a local single-node Apache Kafka broker (KRaft) for development",
        description="Run a local single-node Apache Kafka broker from its jars (no Docker).",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="broker folder (config, data, log); default: <cache>/local-kafka/default",
    )
    parser.add_argument(
        "--kafka-version",
        default=DEFAULT_KAFKA_VERSION,
        help=f"the Apache Kafka release the broker runs (default {DEFAULT_KAFKA_VERSION})",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("fetch", help="download the broker jars with Maven (once)")
    start = actions.add_parser("start", help="start the broker in the background")
    start.add_argument("--port", type=_port, default=None, help="listener port (default: free)")
    start.add_argument(
        "--secure",
        action="store_true",
        help="also serve SASL_SSL and SASL_PLAINTEXT (SCRAM-SHA-256, PLAIN) with a generated "
        "CA; writes plateau's kafka settings to <dir>/security/plateau-kafka.yaml",
    )
    actions.add_parser("stop", help="stop the broker (SIGTERM, then SIGKILL)")
    actions.add_parser("status", help="say whether the broker runs and where")
    parser.set_defaults(handler=run)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (1 to 65535)")
    return port


def run(args: argparse.Namespace) -> int:
    from bridge.errors import LocalKafkaError
    from bridge.local_kafka.broker import STATE_FILE, BrokerSettings, BrokerState
    from bridge.local_kafka.jars import kafka_libs
    from bridge.local_kafka.processes import is_broker_process
    from bridge.local_kafka.security import SecuritySettings
    from plateau_core.cache import default_cache_dir

    settings = BrokerSettings(kafka_version=args.kafka_version)
    work_dir: Path = args.dir or default_cache_dir() / "local-kafka" / "default"
    if args.action == "fetch":
        print(kafka_libs(args.kafka_version))
        return 0
    state = BrokerState.read(work_dir)
    if state is not None and not is_broker_process(state.pid):
        # A broker that died without `stop` leaves its state file behind.
        (work_dir / STATE_FILE).unlink(missing_ok=True)
        state = None
    if args.action == "start":
        if state is None:
            _check_start(work_dir, args.port)
        if args.secure:
            settings = BrokerSettings(kafka_version=args.kafka_version, security=SecuritySettings())
        return _start(work_dir, settings, state, args.port)
    if args.action == "stop":
        return _stop(work_dir, settings, state)
    if args.action == "status":
        return _status(work_dir, state)
    raise LocalKafkaError(f"unknown action {args.action!r}")


def _check_start(work_dir: Path, port: int | None) -> None:
    """What would make the broker fail at start, said before Java takes seconds to."""
    import socket

    from bridge.errors import LocalKafkaError

    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalKafkaError(f"broker folder {work_dir}: {exc.strerror or exc}") from None
    if port is None:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As the broker binds: an address in TIME_WAIT from its last run is free to it.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise LocalKafkaError(
                f"port {port} on 127.0.0.1 is in use ({exc.strerror or exc}); pick another "
                "--port, or leave it out for a free one"
            ) from None


def _start(
    work_dir: Path, settings: BrokerSettings, state: BrokerState | None, port: int | None
) -> int:
    from bridge.local_kafka.broker import LocalKafka

    if state is not None:
        print(f"already running: {state.bootstrap_servers} (pid {state.pid})")
        return 0
    broker = LocalKafka(work_dir, settings, port=port)
    bootstrap = broker.start()
    if settings.security is not None:
        secured = broker.security
        snippet = _write_client_settings(work_dir, secured)
        print(
            f"SASL_SSL: {secured.sasl_ssl_bootstrap}, SASL_PLAINTEXT: "
            f"{secured.sasl_plaintext_bootstrap}, user {secured.username}, CA {secured.ca_file}"
        )
        print(f"plateau settings (with the password): {snippet}")
    print(bootstrap)
    return 0


def _write_client_settings(work_dir: Path, secured: SecureEndpoints) -> Path:
    """A `kafka:` section to paste into plateau.yaml; owner-only, as it holds the password."""
    import yaml

    from bridge.local_kafka.security import SECURITY_DIR, write_private

    config = secured.client_config()
    kafka: dict[str, str] = {"bootstrap_servers": config.pop("bootstrap.servers"), **config}
    path = work_dir / SECURITY_DIR / "plateau-kafka.yaml"
    write_private(path, yaml.safe_dump({"kafka": kafka}, sort_keys=False))
    return path


def _stop(work_dir: Path, settings: BrokerSettings, state: BrokerState | None) -> int:
    from bridge.local_kafka.broker import STATE_FILE
    from bridge.local_kafka.processes import stop_pid

    if state is None:
        print("not running")
        return 0
    stop_pid(state.pid, settings.stop_timeout_s)
    (work_dir / STATE_FILE).unlink(missing_ok=True)
    print(f"stopped (pid {state.pid})")
    return 0


def _status(work_dir: Path, state: BrokerState | None) -> int:
    from bridge.local_kafka.processes import broker_answers

    if state is None:
        print("not running")
        return 1
    answering = broker_answers(state.bootstrap_servers)
    uptime = time.time() - state.started_at
    secured = (
        f", SASL_SSL {state.secure_bootstrap_servers}" if state.secure_bootstrap_servers else ""
    )
    print(
        f"{'running' if answering else 'not answering'}: {state.bootstrap_servers} "
        f"(pid {state.pid}, Kafka {state.kafka_version}, up {uptime:.0f}s, dir {work_dir}{secured})"
    )
    return 0 if answering else 1
