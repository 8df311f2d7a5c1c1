"""`plateau demo` (the main job end to end on embedded defaults) and `plateau demo-producer`
(its producer on its own, against any broker)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="local broker + demo producer + plateau serve, end to end (--direct: the "
        "producer writes to plateau's Kafka API, no broker)",
    )
    parser.add_argument(
        "--seconds", type=_positive_float, default=10.0, help="how long to produce (default 10)"
    )
    parser.add_argument(
        "--rate", type=_positive_int, default=20_000, help="events per second (default 20000)"
    )
    parser.add_argument(
        "--partitions", type=_positive_int, default=4, help="of the demo topic (default 4)"
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="keep the store here (default: temporary)"
    )
    parser.add_argument(
        "--direct",
        action="store_true",
        help="no broker: the demo producer writes to plateau's own Kafka API",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show serve's log lines too (by default only its warnings and the progress)",
    )
    parser.set_defaults(handler=_demo)

    producer = subparsers.add_parser(
        "demo-producer",
        help="write demo JSON log events to a Kafka topic until stopped (or for --seconds)",
    )
    producer.add_argument(
        "--bootstrap-servers",
        required=True,
        type=_bootstrap_servers,
        metavar="HOST:PORT[,...]",
        help="the Kafka brokers",
    )
    producer.add_argument("--topic", required=True, type=_topic, help="created if missing")
    producer.add_argument(
        "--partitions",
        type=_positive_int,
        default=4,
        help="partitions when the topic is created (default 4); an existing topic is kept",
    )
    producer.add_argument(
        "--rate", type=_positive_int, default=1000, help="events per second (default 1000)"
    )
    producer.add_argument(
        "--seconds",
        type=_positive_float,
        default=None,
        help="produce rate x seconds events, then exit (default: until SIGTERM or Ctrl-C)",
    )
    producer.set_defaults(handler=_demo_producer)


def _demo(args: argparse.Namespace) -> int:
    from bridge.demo.run import run_demo

    return run_demo(
        seconds=args.seconds,
        rate=args.rate,
        partitions=args.partitions,
        data_dir=args.data_dir,
        verbose=args.verbose,
        log_format=args.log_format,
        direct=args.direct,
    )


def _demo_producer(args: argparse.Namespace) -> int:
    from bridge.demo.events import run_producer

    run_producer(
        args.bootstrap_servers,
        args.topic,
        partitions=args.partitions,
        rate=args.rate,
        seconds=args.seconds,
    )
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text!r}")
    return value


def _topic(text: str) -> str:
    from plateau_core.errors import InvalidInputError
    from plateau_core.names import validate_topic

    try:
        return validate_topic(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bootstrap_servers(text: str) -> str:
    for server in text.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"expected host:port[,host:port...], got {text!r}")
    return text
