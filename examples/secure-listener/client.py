"""A producer for the secure listener: SASL_SSL with SCRAM-SHA-512, trusting the CA that
signed plateau's certificate. Clients built on librdkafka (confluent-kafka for Go, .NET,
JavaScript) take the same settings.

    export APP_TEAM_PASSWORD='...'     # the password serve has for the user app-team
    .venv/bin/python examples/secure-listener/client.py [--bootstrap localhost:9093]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

CA_FILE = Path(__file__).resolve().parent / "tls" / "ca.pem"  # from make-certs.sh


def client_settings(bootstrap: str, username: str, password: str, ca_file: Path) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": username,
        "sasl.password": password,
        # The CA that signed plateau's certificate; left out, the system's CAs are trusted.
        "ssl.ca.location": str(ca_file),
        # librdkafka's default, spelled out: the certificate must name the host dialled, or
        # anyone with a certificate from the same CA could pose as plateau.
        "ssl.endpoint.identification.algorithm": "https",
        "enable.idempotence": True,
        "acks": "all",
        "delivery.timeout.ms": 30_000,
    }


def send(settings: dict[str, Any], topic: str, values: list[bytes]) -> list[int]:
    """Produce `values` to `topic`; their offsets once all are acknowledged, else
    RuntimeError with the errors (a refused login, a topic outside the user's list)."""
    offsets: list[int] = []
    errors: dict[int, str] = {}  # the first error of each kind; librdkafka repeats them

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.setdefault(err.code(), err.str())
        else:
            offsets.append(int(msg.offset()))

    def client_error(err: KafkaError) -> None:
        # A refused login or TLS handshake is no delivery report: librdkafka says it here,
        # and retrying with the same settings cannot help. Other errors here are transient.
        if err.fatal() or err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            errors.setdefault(err.code(), err.str())

    producer = Producer({**settings, "error_cb": client_error})
    for value in values:
        producer.produce(topic, value=value, on_delivery=report)
    deadline = time.monotonic() + 35
    while len(producer) and not errors and time.monotonic() < deadline:
        producer.flush(0.5)
    if len(producer) or errors:
        failure = "; ".join(errors.values()) or f"{len(producer)} record(s) unanswered"
        # Queued records would otherwise be retried until delivery.timeout.ms.
        producer.purge()
        producer.flush(0)
        raise RuntimeError(f"{topic}: {failure}")
    return offsets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9093", help="kafka_api.advertised")
    parser.add_argument("--user", default="app-team")
    parser.add_argument("--topic", default="app-orders")
    parser.add_argument("--ca-file", type=Path, default=CA_FILE)
    args = parser.parse_args(argv)
    password = os.environ.get("APP_TEAM_PASSWORD")
    if not password:
        print("set APP_TEAM_PASSWORD to the user's password", file=sys.stderr)
        return 2
    settings = client_settings(args.bootstrap, args.user, password, args.ca_file)
    orders = [json.dumps({"order": n, "amount": 10 * n}).encode() for n in range(1, 4)]
    try:
        offsets = send(settings, args.topic, orders)
    except RuntimeError as exc:
        print(f"not stored: {exc}", file=sys.stderr)
        return 1
    print(f"{len(offsets)} record(s) stored in {args.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
