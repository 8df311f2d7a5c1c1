"""`plateau query` and `plateau replicate`: the Spark side of the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bridge.commands import config_argument
from bridge.config import load_config
from bridge.config.units import parse_duration
from bridge.query import FORMATS, QueryError, run_query
from bridge.replicate import replicate


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    query = subparsers.add_parser(
        "query", help="run Spark SQL over the stored topics (each topic is a view)"
    )
    config_argument(query)
    query.add_argument(
        "sql", help='for example: "SELECT partition, count(*) FROM `app-logs` GROUP BY 1"'
    )
    query.add_argument("--format", choices=FORMATS, default="table", dest="fmt")
    query.add_argument("--output", "-o", type=Path, help="write here instead of stdout")
    query.add_argument("--limit", type=int, default=20, help="rows shown by --format table")
    query.add_argument("--master", help="Spark master (default: config spark.master, local[*])")
    query.set_defaults(handler=_query)

    rep = subparsers.add_parser(
        "replicate", help="copy sealed segments to Parquet (s3:// or a folder)"
    )
    config_argument(rep)
    rep.add_argument("--target", help="s3://bucket/prefix or file:///path (default: config)")
    when = rep.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one run, then exit")
    when.add_argument(
        "--interval", type=parse_duration, help="pause between runs (default: config, 60s)"
    )
    rep.add_argument("--master", help="Spark master (default: config spark.master, local[*])")
    rep.set_defaults(handler=_replicate)


def _query(args: argparse.Namespace) -> int:
    if args.limit < 1:
        print("plateau query: --limit must be at least 1", file=sys.stderr)
        return 2
    try:
        run_query(
            load_config(args.config),
            args.sql,
            fmt=args.fmt,
            output=args.output,
            limit=args.limit,
            master=args.master,
        )
    except QueryError as exc:
        print(f"plateau query: {exc}", file=sys.stderr)
        return 1
    return 0


def _replicate(args: argparse.Namespace) -> int:
    replicate(
        load_config(args.config),
        target=args.target,
        once=args.once,
        interval_s=args.interval,
        master=args.master,
    )
    return 0
