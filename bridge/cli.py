"""The `plateau` command line: one console script with a subcommand per job."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from bridge import commands, demo, spark_commands, store_commands
from bridge.errors import BridgeError
from bridge.local_kafka import commands as kafka_commands
from bridge.logs import configure_logging
from plateau_core.errors import PlateauError

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plateau",
        description="Land Kafka records in a fixed-size, queryable store of Arrow segments.",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parsers(subparsers)
    store_commands.add_parsers(subparsers)
    spark_commands.add_parsers(subparsers)
    demo.add_parser(subparsers)
    kafka_commands.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    os.environ.setdefault("PLATEAU_LOG_LEVEL", args.log_level)  # for worker processes
    handler: Handler = args.handler
    try:
        return handler(args)
    except (BridgeError, PlateauError) as exc:
        print(f"plateau {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
