"""`plateau replicate`: the replication job, once or on an interval."""

from __future__ import annotations

import threading

import structlog
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from bridge.config.models import Config
from bridge.errors import BridgeError
from bridge.serve import install_stop_handlers, open_store
from bridge.spark_jobs import spark_for, spark_message
from plateau_core.replication import ReplicationReport, Replicator, Target

log = structlog.get_logger("plateau.replicate")


class ReplicationFailedError(BridgeError):
    """A replication run failed; nothing of it was recorded, the next run redoes it."""


def replicate(
    config: Config,
    *,
    target: str | None = None,
    once: bool = False,
    interval_s: float | None = None,
    master: str | None = None,
    stop: threading.Event | None = None,
) -> list[ReplicationReport]:
    """Run until stopped (or once); returns the reports of the runs."""
    uri = target or config.replication.target
    if not uri:
        raise BridgeError(
            "no replication target: set replication.target in the config or pass --target"
        )
    parsed = Target.parse(uri, config.replication.s3.settings())
    stop = stop or threading.Event()
    if not once:
        install_stop_handlers(stop)
    wait_s = config.replication.interval if interval_s is None else interval_s
    reports = []
    with open_store(config) as store:
        replicator = Replicator(
            store,
            parsed,
            file_bytes=config.replication.file_size,
            compression=config.replication.compression,
            topics=config.replication.topics,
        )
        spark = spark_for(config, master)
        while True:
            reports.append(_run(replicator, spark))
            if once or stop.wait(wait_s):
                return reports


def _run(replicator: Replicator, spark: SparkSession) -> ReplicationReport:
    try:
        report = replicator.run_once(spark)
    except (PySparkException, Py4JError) as exc:
        log.error("replication_failed", target=replicator.target.uri, error=spark_message(exc))
        raise ReplicationFailedError(
            f"replication to {replicator.target.uri} failed: {spark_message(exc)}"
        ) from None
    log.info(
        "replication_run",
        target=replicator.target.uri,
        segments=report.segments,
        files=report.files,
        rows=report.rows,
        mb_read=round(report.bytes_read / 2**20, 2),
        mb_written=round(report.bytes_written / 2**20, 2),
        seconds=round(report.seconds, 3),
        mb_per_s=round(report.mb_per_s, 2),
        unfinished_files_removed=report.orphans_removed,
        replicated_offsets=report.partitions,
    )
    return report
