"""What `plateau query` and `plateau replicate` share: the Spark session, topic frames, errors."""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame, SparkSession

from bridge.config.models import Config
from plateau_core.spark import session


def spark_for(config: Config, master: str | None) -> SparkSession:
    # PySpark logs every failed query with its JVM trace; plateau reports the message.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return session(master or config.spark.master, **config.spark.conf)


def topic_frame(spark: SparkSession, config: Config, topic: str) -> DataFrame:
    reader = spark.read.format("plateau").option("path", str(config.storage.data_dir))
    if config.storage.manifest_url:
        reader = reader.option("manifest", config.storage.manifest_url)
    return reader.option("topic", topic).load()


def spark_message(exc: Exception) -> str:
    """Spark's own message: its first line, without the plan and JVM stack trace after it."""
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(";") if text else type(exc).__name__
