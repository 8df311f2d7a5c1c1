"""Whether Spark still runs jobs, asked when a topic's Spark job failed: a failure of the
topic's own (a segment the connector refuses, a value or schema the writer refuses) leaves
Spark answering, and the topic alone is held back; Spark that is gone (its JVM, the
driver's connection to it, every executor) fails every topic after it alike, and ends the
run."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import suppress
from typing import TYPE_CHECKING

import structlog

from plateau_spark.jobs import spark_message

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("plateau.replication")

# A one-row job takes well under a second on a live session; a cluster may first have to
# get an executor back. Past this, Spark is taken to be away.
PROBE_TIMEOUT_S = 60.0


def spark_answers(spark: SparkSession, topic: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Run a one-row job in `spark`, waiting at most `timeout_s`; whether it answered.
    `topic` is the one whose job failed, for the log."""
    group = f"plateau-probe-{uuid.uuid4().hex}"
    answered = threading.Event()
    problem: list[str] = []

    def probe() -> None:
        try:
            spark.sparkContext.setJobGroup(
                group, f"plateau replicate: does Spark answer after {topic}'s job failed?"
            )
            if spark.range(1).count() == 1:
                answered.set()
        except Exception as exc:  # whatever it is, Spark did not answer
            problem.append(f"{type(exc).__name__}: {spark_message(exc)}")

    started = time.monotonic()
    # A thread, so a JVM that hangs (or a cluster without executors) cannot hold the run.
    thread = threading.Thread(target=probe, name="plateau-spark-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    seconds = round(time.monotonic() - started, 3)
    if answered.is_set():
        log.info("spark_probe_answered", topic=topic, seconds=seconds)
        return True
    if thread.is_alive():
        problem.append(f"no answer within {timeout_s:g} s")
        # Not waited for either: the cancel goes to the same JVM that did not answer.
        threading.Thread(target=_cancel, args=(spark, group), daemon=True).start()
    log.error("spark_probe_failed", topic=topic, seconds=seconds, error="; ".join(problem))
    return False


def _cancel(spark: SparkSession, group: str) -> None:
    with suppress(Exception):
        spark.sparkContext.cancelJobGroup(group)
