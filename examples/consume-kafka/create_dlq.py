"""Create the dead-letter topics plateau.yaml names, in the Kafka cluster it consumes from:
plateau produces to them but creates no topics there. The config's brokers and security
settings (and PLATEAU__KAFKA__* variables) are used, as serve would use them.

    .venv/bin/python examples/consume-kafka/create_dlq.py [--config FILE] [--partitions 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bridge.config import load_config

CONFIG = Path(__file__).resolve().parent / "plateau.yaml"


def create_dead_letter_topics(config_file: Path, partitions: int = 1) -> dict[str, str]:
    """Each dead-letter topic of a consumed mapping: "created", or "exists" when it did."""
    config = load_config(config_file)
    wanted = sorted({m.dlq for m in config.consumed if m.on_error == "dlq" and m.dlq})
    if not wanted:
        return {}
    admin = AdminClient(
        {"bootstrap.servers": config.kafka.bootstrap_servers, **config.kafka.librdkafka()}
    )
    # replication_factor -1: the cluster's default.replication.factor.
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication_factor=-1) for name in wanted],
        operation_timeout=30,
    )
    done: dict[str, str] = {}
    for name, future in futures.items():
        try:
            future.result()
            done[name] = "created"
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            done[name] = "exists"
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        done = create_dead_letter_topics(args.config, args.partitions)
    except KafkaException as exc:
        print(f"not created: {exc.args[0].str()}", file=sys.stderr)
        return 1
    for name, outcome in done.items():
        print(f"{name}: {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
