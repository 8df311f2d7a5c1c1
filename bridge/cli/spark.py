"""`plateau query` and `plateau replicate`: the Spark side of the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.cli.serve import config_argument, duration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from bridge.config.models import Config
    from plateau_core.store import Store
    from plateau_spark.jobs import StoreLocation
    from plateau_spark.replication import Replicator, Target

# Kept here rather than imported: listing the choices must not load Spark.
FORMATS = ("table", "json", "csv", "parquet")
MASTER_HELP = (
    "Spark master (default: config spark.master, else $PLATEAU_SPARK_MASTER, else local[*])"
)


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
    query.add_argument("--master", help=MASTER_HELP)
    query.set_defaults(handler=_query)

    rep = subparsers.add_parser(
        "replicate",
        help="copy sealed segments to Parquet or Iceberg tables (s3:// or a folder)",
    )
    config_argument(rep)
    rep.add_argument(
        "--target", help="s3://bucket/prefix, file:///path or a folder (default: config)"
    )
    when = rep.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one run, then exit")
    when.add_argument("--interval", type=duration, help="pause between runs (default: config, 60s)")
    when.add_argument(
        "--compact",
        action="store_true",
        help="format iceberg: rewrite small data files and expire old snapshots, then exit",
    )
    rep.add_argument("--master", help=MASTER_HELP)
    rep.set_defaults(handler=_replicate)


def _query(args: argparse.Namespace) -> int:
    from bridge.config import load_config
    from plateau_spark.errors import QueryError
    from plateau_spark.query import run_query

    if args.limit < 1:
        print("plateau query: --limit must be at least 1", file=sys.stderr)
        return 2
    config = load_config(args.config)
    try:
        run_query(
            _spark(config, args.master),
            _location(config),
            args.sql,
            fmt=args.fmt,
            output=args.output,
            limit=args.limit,
        )
    except QueryError as exc:
        print(f"plateau query: {exc}", file=sys.stderr)
        return 1
    return 0


def _replicate(args: argparse.Namespace) -> int:
    import threading

    from bridge.config import load_config
    from bridge.errors import BridgeError
    from bridge.serve import install_stop_handlers
    from plateau_spark.replicate import replicate
    from plateau_spark.replication import Target

    if args.interval is not None and args.interval <= 0 and not args.once:
        # Without a pause the loop starts a run as soon as the last one ends, over and over.
        raise BridgeError("--interval must be more than 0s (--once runs a single time)")
    config = load_config(args.config)
    uri = args.target or config.replication.target
    if not uri:
        raise BridgeError(
            "no replication target: set replication.target in the config or pass --target"
        )
    target = Target.parse(uri, config.replication.s3.settings())
    iceberg = config.replication.format == "iceberg"
    if args.compact and not iceberg:
        raise BridgeError("--compact needs replication.format: iceberg (Parquet has no tables)")
    stop = threading.Event()
    if not (args.once or args.compact):
        install_stop_handlers(stop)
    with _location(config).open() as store:
        replicator = _replicator(config, store, target)
        if args.compact:
            return _compact(replicator)
        replicate(
            replicator,
            None if iceberg else _spark(config, args.master),
            interval_s=config.replication.interval if args.interval is None else args.interval,
            once=args.once,
            stop=stop,
        )
    return 0


def _replicator(config: Config, store: Store, target: Target) -> Replicator:
    from plateau_spark.replication import IcebergReplicator, IcebergSettings, Replicator

    replication = config.replication

    def consumed(topic: str) -> bool:
        return config.source_of(topic) is not None

    if replication.format == "parquet":
        return Replicator(
            store,
            target,
            file_bytes=replication.file_size,
            compression=replication.compression,
            topics=replication.topics,
            consumed=consumed,
        )
    iceberg = replication.iceberg
    settings = IcebergSettings(
        catalog_uri=iceberg.catalog_uri,
        catalog_name=iceberg.catalog_name,
        namespace=iceberg.namespace,
        commit_retries=iceberg.commit_retries,
        small_file_bytes=iceberg.small_file_size,
        snapshot_retention_s=iceberg.snapshot_retention,
        min_snapshots=iceberg.min_snapshots,
    )
    return IcebergReplicator(
        store,
        target,
        settings,
        file_bytes=replication.file_size,
        compression=replication.compression,
        topics=replication.topics,
        consumed=consumed,
    )


def _compact(replicator: Replicator) -> int:
    import json

    from plateau_spark.replication import IcebergReplicator

    assert isinstance(replicator, IcebergReplicator)
    for topic, report in replicator.maintain().items():
        print(json.dumps({"topic": topic, **vars(report)}))
    return 0


def _spark(config: Config, master: str | None) -> SparkSession:
    from plateau_spark import session
    from plateau_spark.jobs import quiet_query_logs

    quiet_query_logs()
    return session(master or config.spark.master, **config.spark.conf)


def _location(config: Config) -> StoreLocation:
    from plateau_spark.jobs import StoreLocation

    return StoreLocation(config.storage.data_dir, config.storage.manifest_url)
