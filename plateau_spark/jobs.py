"""What `plateau query` and `plateau replicate` share: where the store is, topic frames,
Spark's error messages."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from plateau_core import Store


@dataclass(frozen=True)
class StoreLocation:
    """A store as Spark jobs reach it: its data folder and, if not the default SQLite file
    inside it, the manifest's SQLAlchemy URL."""

    data_dir: Path
    manifest_url: str | None = None

    def open(self) -> Store:
        return Store.open(self.data_dir, manifest_url=self.manifest_url)


def quiet_query_logs() -> None:
    """PySpark logs every failed query with its JVM trace; plateau reports the message."""
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)


def topic_frame(spark: SparkSession, location: StoreLocation, topic: str) -> DataFrame:
    reader = spark.read.format("plateau").option("path", str(location.data_dir))
    if location.manifest_url:
        reader = reader.option("manifest", location.manifest_url)
    return reader.option("topic", topic).load()


def spark_message(exc: Exception) -> str:
    """Spark's own message: its first line, without the plan and JVM stack trace after it.
    A JVM exception PySpark does not convert (a failed job's SparkException) says first
    only which call failed ("An error occurred while calling o71.parquet."): its message
    is the line after, which names the cause."""
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    if lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        return lines[1].removeprefix(": ").rstrip(";")
    return lines[0].rstrip(";")
