"""`session()`: a SparkSession with plateau's connector on its classpath."""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from plateau_spark.connector_build import ConnectorBuildError, connector_jars

MASTER_ENV = "PLATEAU_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}
_LOCAL_DEFAULTS = {
    # 200 shuffle partitions cost more than they bring on one machine.
    "spark.sql.shuffle.partitions": str(max(4, 2 * (os.cpu_count() or 1))),
}


def session(master: str | None = None, **conf: Any) -> SparkSession:
    """The SparkSession plateau jobs use (created once per process, then shared).

    `master` defaults to $PLATEAU_SPARK_MASTER, then local[*]; pass spark://, yarn or
    k8s:// URLs for a cluster. `conf` keys are Spark settings, for example
    `session(**{"spark.executor.memory": "4g"})`; they win over plateau's defaults.
    """
    chosen = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    # Executors must run an interpreter that has plateau_core installed: this one.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = dict(_DEFAULTS)
    if chosen.startswith("local"):
        settings.update(_LOCAL_DEFAULTS)
    settings.update({key: str(value) for key, value in conf.items()})
    settings["spark.jars"] = _joined(settings.get("spark.jars"), jars())
    builder = SparkSession.builder.master(chosen).appName(settings.pop("spark.app.name", "plateau"))
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def jars() -> list[str]:
    """The connector's jars, for `spark.jars` or `spark-submit --jars` of sessions made
    without `session()`; built on first use."""
    try:
        return [str(jar) for jar in connector_jars()]
    except ConnectorBuildError as exc:
        raise ConnectorBuildError(f"plateau's Spark connector could not be built: {exc}") from None


def _joined(existing: str | None, added: list[str]) -> str:
    items = [i for i in (existing or "").split(",") if i]
    return ",".join([*items, *(a for a in added if a not in items)])
