"""`session()`: a SparkSession with the plateau source registered and pushdown on."""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from plateau_spark.jvm_guard import EXTENSION_CLASS, ExtensionBuildError, extension_jar
from plateau_spark.source.source import PlateauDataSource

MASTER_ENV = "PLATEAU_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
_DEFAULTS = {
    # Without it Spark never calls pushFilters, and every query reads every segment.
    "spark.sql.python.filterPushdown.enabled": "true",
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
    _install_extension(settings)
    builder = SparkSession.builder.master(chosen).appName(settings.pop("spark.app.name", "plateau"))
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("plateau")` and `readStream.format("plateau")` available."""
    spark.dataSource.register(PlateauDataSource)


def _install_extension(settings: dict[str, str]) -> None:
    """Add the extension that keeps pushdown correct (see jvm_guard). Without it a query
    could read another query's filtered segment list, so failing to build it is an error."""
    try:
        jar = extension_jar()
    except ExtensionBuildError as exc:
        raise ExtensionBuildError(
            f"plateau's Spark extension could not be built: {exc}. Spark sessions made "
            "without plateau_spark.session() read plateau with "
            'option("pushdown", "false") instead.'
        ) from None
    settings["spark.jars"] = _joined(settings.get("spark.jars"), str(jar))
    settings["spark.sql.extensions"] = _joined(
        settings.get("spark.sql.extensions"), EXTENSION_CLASS
    )


def _joined(existing: str | None, item: str) -> str:
    items = [i for i in (existing or "").split(",") if i]
    return ",".join([*items, item] if item not in items else items)
