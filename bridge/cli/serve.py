"""`plateau serve | check | status`: the main job and the two commands around it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bridge.ops import ANSWER_TIMEOUT_S


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve_parser = subparsers.add_parser(
        "serve",
        help="consume the configured topics into plateau and take produce traffic on its "
        "Kafka API when configured (the main job)",
    )
    config_argument(serve_parser)
    serve_parser.add_argument(
        "--workers", type=int, default=1, help="consumer processes on this node (default 1)"
    )
    serve_parser.set_defaults(handler=_serve)

    check_parser = subparsers.add_parser(
        "check", help="validate the configuration and reach the brokers"
    )
    config_argument(check_parser)
    timeout_argument(check_parser, "the brokers and the schema registry")
    check_parser.set_defaults(handler=_check)

    status_parser = subparsers.add_parser(
        "status", help="per topic and partition: watermark, Kafka offsets, lag, segments"
    )
    config_argument(status_parser)
    status_parser.add_argument("--json", action="store_true", help="one JSON object")
    timeout_argument(status_parser, "each of Kafka's answers")
    status_parser.set_defaults(handler=_status)


def config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", "-c", type=Path, required=True, help="the YAML configuration file"
    )


def timeout_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--timeout",
        type=_positive_duration,
        default=ANSWER_TIMEOUT_S,
        help=f"how long to wait for {what} (default {ANSWER_TIMEOUT_S:g}s)",
    )


def duration(text: str) -> float:
    """A command-line duration as the config takes them (`500ms`, `10s`, `5m`)."""
    from bridge.config.units import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_duration(text: str) -> float:
    seconds = duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError("must be more than 0s")
    return seconds


def _serve(args: argparse.Namespace) -> int:
    from bridge.config import load_config
    from bridge.serve import serve

    if args.workers < 1:
        print("plateau serve: --workers must be at least 1", file=sys.stderr)
        return 2
    return serve(load_config(args.config), args.workers)


def _check(args: argparse.Namespace) -> int:
    from bridge.config import load_config
    from bridge.ops.check import check

    for line in check(load_config(args.config), args.timeout):
        print(line)
    return 0


def _status(args: argparse.Namespace) -> int:
    from bridge.config import load_config
    from bridge.ops.status import collect, render

    document, error = collect(load_config(args.config), args.timeout)
    print(render(document, args.json))
    if error is not None:
        print(f"plateau status: {error}", file=sys.stderr)
        return 1
    return 0
