"""Resolve Spark's Kafka connector for the installed pyspark with Maven, once, into the cache.

    python bench/spark_kafka_jars.py                       # prints one jar path per line
    python bench/spark_kafka_jars.py --version 4.2.0       # another connector release

`connector_jars()` returns the jars that `spark.readStream.format("kafka")` needs on top of
what pyspark ships: org.apache.spark:spark-sql-kafka-0-10_2.13 and its runtime dependencies
(spark-token-provider-kafka-0-10, kafka-clients, commons-pool2). Maven resolves the whole
runtime closure into `<cache>/spark-kafka/<version>/` (the cache folder of
plateau_core.cache); every artifact of which pyspark/jars already holds a copy (Scala, the
Hadoop client, snappy, lz4, slf4j, spark-tags, ...) is left out, so the classpath never has
two versions of one library: the one Spark was built and tested with wins.

The version is pyspark.__version__ when Maven Central has that release; a new Spark release
can reach PyPI before its connector reaches Maven Central (pyspark 4.3.0 had none when this
was written), and then the previous minor release's connector (4.2.0) is used, with a line on
stderr; results record the version used. $PLATEAU_SPARK_KAFKA_VERSION or `version=` pin one.
The connector uses Spark internals, so a release other than Spark's own is a compromise to
report, not a silent default.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pyspark

from bridge.local_kafka.jars import _exclusive
from plateau_core.cache import default_cache_dir

CONNECTOR = ("org.apache.spark", "spark-sql-kafka-0-10_2.13")
PYSPARK_JARS = Path(pyspark.__file__).resolve().parent / "jars"
VERSION_ENV = "PLATEAU_SPARK_KAFKA_VERSION"
_COMPLETE_MARKER = ".complete"
MISSING_TTL_S = 86_400

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.plateau</groupId>
  <artifactId>plateau-bench-spark-kafka</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


class ConnectorError(Exception):
    """The connector jars cannot be resolved."""


def candidates() -> list[str]:
    """Connector releases to try, best first."""
    pinned = os.environ.get(VERSION_ENV)
    if pinned:
        return [pinned]
    major, minor = (int(part) for part in pyspark.__version__.split(".")[:2])
    return [pyspark.__version__] + ([f"{major}.{minor - 1}.0"] if minor > 0 else [])


def resolve(cache_dir: Path | None = None) -> tuple[str, list[Path]]:
    """The first of `candidates()` that resolves, and its jars. A release Maven could not
    find is not asked for again for a day (each miss costs Maven a round of lookups)."""
    failures: list[str] = []
    folder = (cache_dir or default_cache_dir()) / "spark-kafka"
    for version in candidates():
        missing = folder / f"{version}.missing"
        if missing.exists() and time.time() - missing.stat().st_mtime < MISSING_TTL_S:
            failures.append(
                f"{version}: not on Maven Central at {time.ctime(missing.stat().st_mtime)}"
            )
            continue
        try:
            return version, connector_jars(version, cache_dir)
        except ConnectorError as exc:
            failures.append(str(exc))
            missing.parent.mkdir(parents=True, exist_ok=True)
            missing.write_text(str(exc))
            print(
                f"no Kafka connector {version} for pyspark {pyspark.__version__}", file=sys.stderr
            )
    raise ConnectorError("\n\n".join(failures))


def connector_version() -> str:
    return resolve()[0]


def connector_jars(version: str | None = None, cache_dir: Path | None = None) -> list[Path]:
    """The jars to put in `spark.jars`, fetching them first if they are not in the cache."""
    if version is None:
        return resolve()[1]
    root = (cache_dir or default_cache_dir()) / "spark-kafka" / version
    if not (root / _COMPLETE_MARKER).exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        with _exclusive(root.parent / f"{version}.lock"):
            # Another process may have finished the download while this one waited.
            if not (root / _COMPLETE_MARKER).exists():
                _fetch(version, root)
    jars = sorted(root.glob("*.jar"))
    if not any(j.name.startswith(CONNECTOR[1] + "-") for j in jars):
        raise ConnectorError(f"{root} holds no {CONNECTOR[1]} jar; delete it to fetch again")
    return jars


def shipped_by_pyspark(artifact: str, names: Sequence[str]) -> str | None:
    """The jar in pyspark/jars that is a copy of `artifact` (any version), if there is one."""
    prefix = artifact + "-"
    for name in names:
        # A version follows the artifact id: "scala-library-2.13.18.jar", not "-reflect-".
        if name.startswith(prefix) and name[len(prefix) : len(prefix) + 1].isdigit():
            return name
    return None


def _fetch(version: str, root: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConnectorError("Maven (mvn) is not on PATH; it is needed once to fetch the jars")
    started = time.monotonic()
    print(f"fetching {':'.join(CONNECTOR)}:{version} into {root}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="plateau-spark-kafka-") as build:
        pom = Path(build) / "pom.xml"
        pom.write_text(_POM.format(group=CONNECTOR[0], artifact=CONNECTOR[1], version=version))
        # The repository layout (group/artifact/version/) tells each jar's artifact id exactly,
        # which a flat file name does not ("spark-sql-kafka-0-10_2.13-4.2.0.jar").
        resolved = Path(build) / "resolved"
        cmd = [mvn, "-B", "-q", "-U", "-f", str(pom), "dependency:copy-dependencies"]
        cmd += [f"-DoutputDirectory={resolved}", "-DincludeScope=runtime"]
        cmd += ["-Dmdep.useRepositoryLayout=true", "-Dstyle.color=never"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            raise ConnectorError(
                f"Maven could not resolve {':'.join(CONNECTOR)}:{version} (exit "
                f"{done.returncode}); pyspark is {pyspark.__version__}, set {VERSION_ENV} "
                f"to a connector release Maven can reach:\n{tail}"
            )
        spark_names = sorted(p.name for p in PYSPARK_JARS.glob("*.jar"))
        staging = root.with_name(root.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        kept: list[str] = []
        skipped: dict[str, str] = {}
        for jar in sorted(resolved.rglob("*.jar")):
            artifact = jar.parent.parent.name
            twin = shipped_by_pyspark(artifact, spark_names)
            if twin is None:
                shutil.copy2(jar, staging / jar.name)
                kept.append(jar.name)
            else:
                skipped[jar.name] = twin
    record = {
        "version": version,
        "pyspark": pyspark.__version__,
        "jars": kept,
        "left_out_for_pyspark_copy": skipped,
    }
    (staging / _COMPLETE_MARKER).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
    print(
        f"{len(kept)} jars in {time.monotonic() - started:.1f}s; left out, pyspark ships "
        f"them: {', '.join(sorted(skipped)) or 'none'}",
        file=sys.stderr,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--version", help="connector release (default: pyspark's own, else the previous minor)"
    )
    args = parser.parse_args(argv)
    try:
        jars = connector_jars(args.version)
    except ConnectorError as exc:
        print(exc, file=sys.stderr)
        return 1
    for jar in jars:
        print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
