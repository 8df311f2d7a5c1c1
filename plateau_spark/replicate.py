"""`plateau replicate`: the replication job, once or on an interval."""

from __future__ import annotations

import threading

import structlog
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from plateau_core.errors import PlateauError
from plateau_spark.errors import ReplicationFailedError
from plateau_spark.jobs import spark_message
from plateau_spark.replication import ReplicationReport, Replicator

log = structlog.get_logger("plateau.replicate")


def replicate(
    replicator: Replicator,
    spark: SparkSession | None,
    *,
    interval_s: float,
    once: bool = False,
    stop: threading.Event | None = None,
) -> list[ReplicationReport]:
    """Run until `stop` is set (or once), `interval_s` apart; returns the runs' reports.
    `spark` writes Parquet replicas (None: written in this process; Iceberg tables always are).

    Raises ReplicationFailedError when a run with `once` fails: nothing of what failed was
    recorded (a run refusing a topic, ReplicaOwnerError, replicated the other topics).
    On an interval a failed run is logged (replication_failed) and the next one tries again:
    object storage that is away for a while must not stop replication for good.
    """
    stop = stop or threading.Event()
    reports = []
    while True:
        try:
            reports.append(_run(replicator, spark))
        except ReplicationFailedError:
            if once:
                raise
        if once or stop.wait(interval_s):
            return reports


def _run(replicator: Replicator, spark: SparkSession | None) -> ReplicationReport:
    try:
        report = replicator.run_once(spark)
    except (PySparkException, Py4JError, PlateauError, OSError) as exc:
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
        files_migrated=report.files_migrated,
        replicated_offsets=report.partitions,
    )
    return report
