"""The `plateau` command line: one console script with a subcommand per job.

Each command group has a module here that builds its parsers and imports what a command
needs only when that command runs, so `plateau status` does not load Spark and `plateau
serve` does not load the local broker's tooling.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from bridge.cli import demo, kafka, serve, spark, store
from bridge.errors import BridgeError
from bridge.logs import LOG_FORMATS, configure_logging
from bridge.version import version
from plateau_core.errors import PlateauError

Handler = Callable[[argparse.Namespace], int]


class _Version(argparse.Action):
    """`--version`: the release, looked up in the package's metadata only when asked (every
    command builds this parser; argparse's own action takes the text up front)."""

    def __init__(self, option_strings: Sequence[str], dest: str) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="print the release installed and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"plateau {version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plateau",
        description="Land Kafka records in a fixed-size, queryable store of Arrow segments.",
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument(
        "--log-level", type=_log_level, default="INFO", help="DEBUG, INFO, WARNING or ERROR"
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="auto",
        help="console: readable lines (coloured on a terminal); json: one JSON object per "
        "line; auto (default): console when stderr is a terminal, else json",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.add_parsers(subparsers)
    store.add_parsers(subparsers)
    spark.add_parsers(subparsers)
    demo.add_parsers(subparsers)
    kafka.add_parser(subparsers)
    return parser


def _log_level(text: str) -> str:
    """The level's name in capitals; any name the logging module knows is taken."""
    name = text.strip().upper()
    if name not in logging.getLevelNamesMapping():
        raise argparse.ArgumentTypeError(f"expected DEBUG, INFO, WARNING or ERROR, got {text!r}")
    return name


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    # Worker processes of this command configure themselves from these.
    os.environ["PLATEAU_LOG_LEVEL"] = args.log_level
    os.environ["PLATEAU_LOG_FORMAT"] = args.log_format
    handler: Handler = args.handler
    try:
        return handler(args)
    except (BridgeError, PlateauError) as exc:
        print(f"plateau {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
