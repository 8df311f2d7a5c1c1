"""The JVM connector behind `spark.read.format("plateau")`, built from its Java source once.

`plateau_spark/connector/` is a Maven project. It compiles against the jars of the Spark that
will load it (pyspark's, or $SPARK_HOME's), passed to Maven by path, so the classes match that
Spark exactly; Maven fetches the SQLite and PostgreSQL JDBC drivers. The jars land in the cache
folder under a key made of the source and the Spark version: an edited source or another Spark
builds anew.

    make spark-connector        # runs main() below
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark
import structlog

from plateau_core.cache import default_cache_dir
from plateau_core.errors import PlateauError

SOURCE_DIR = Path(__file__).with_name("connector")
CONNECTOR_JAR = "plateau-spark-connector.jar"
# The jars of Spark's own the connector compiles against (the pom's jar.* properties).
COMPILE_JARS = (
    "spark-sql",
    "spark-sql-api",
    "spark-catalyst",
    "spark-core",
    "spark-unsafe",
    "spark-common-utils",
    "scala-library",
    "arrow-vector",
    "arrow-memory-core",
    "arrow-format",
    "arrow-compression",
    "flatbuffers-java",
    "jackson-databind",
    "jackson-core",
    "jackson-annotations",
    "lz4-java",
    "slf4j-api",
    "kryo-shaded",
)
_BUILD_TIMEOUT_S = 900

log = structlog.get_logger(__name__)


class ConnectorBuildError(PlateauError):
    """The connector could not be built (no JDK or Maven, Spark's jars not found, a failed
    build); the message names what is missing."""


def spark_jars_dir() -> Path:
    home = os.environ.get("SPARK_HOME")
    for candidate in ([Path(home) / "jars"] if home else []) + [
        Path(pyspark.__file__).parent / "jars"
    ]:
        if candidate.is_dir():
            return candidate
    raise ConnectorBuildError("cannot find Spark's jars (set SPARK_HOME to a Spark installation)")


def source_key() -> str:
    """A digest of the connector's source and the Spark version it is built for."""
    digest = hashlib.sha256(pyspark.__version__.encode())
    for path in sorted(p for p in SOURCE_DIR.rglob("*") if p.is_file() and "target" not in p.parts):
        digest.update(str(path.relative_to(SOURCE_DIR)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def connector_jars() -> list[Path]:
    """The connector's jar and the JDBC drivers it needs, built on first use."""
    folder = default_cache_dir() / "spark" / f"connector-{source_key()}"
    if not (folder / CONNECTOR_JAR).is_file():
        _build(folder)
    return sorted(folder.glob("*.jar"))


def _compile_jar(jars: Path, name: str) -> Path:
    # spark-sql_2.13-4.3.0.jar for spark-sql, never spark-sql-api_2.13-4.3.0.jar
    pattern = re.compile(rf"{re.escape(name)}(_\d+\.\d+)?-\d[\w.\-]*\.jar")
    found = sorted(p for p in jars.iterdir() if pattern.fullmatch(p.name))
    if not found:
        raise ConnectorBuildError(f"Spark's jars in {jars} have no {name}-<version>.jar")
    return found[-1]


def _build(folder: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConnectorBuildError("Maven (mvn) is needed to build it once; it is not on PATH")
    if shutil.which("javac") is None:
        raise ConnectorBuildError("a JDK 17+ (javac) is needed to build it once; none on PATH")
    jars = spark_jars_dir()
    properties = [f"-Djar.{name}={_compile_jar(jars, name)}" for name in COMPILE_JARS]
    folder.parent.mkdir(parents=True, exist_ok=True)
    log.info("spark_connector_building", into=str(folder), spark=pyspark.__version__)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".build-") as work:
        project = Path(work) / "connector"
        shutil.copytree(SOURCE_DIR, project, ignore=shutil.ignore_patterns("target"))
        command = [mvn, "-B", "-q", "-f", str(project / "pom.xml"), "package", *properties]
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=_BUILD_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise ConnectorBuildError(
                f"mvn package did not finish in {_BUILD_TIMEOUT_S} s (is Maven Central reachable?)"
            ) from None
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()
            raise ConnectorBuildError(f"mvn package failed ({result.returncode}): {output[-3000:]}")
        built = Path(work) / "jars"
        built.mkdir()
        shutil.copy2(project / "target" / CONNECTOR_JAR, built / CONNECTOR_JAR)
        for driver in (project / "target" / "lib").glob("*.jar"):
            shutil.copy2(driver, built / driver.name)
        try:
            # Atomic: several processes starting at once each build, one rename wins.
            built.rename(folder)
        except OSError:
            if not (folder / CONNECTOR_JAR).is_file():
                raise
    log.info("spark_connector_built", into=str(folder))
    _remove_stale(folder)


def _remove_stale(current: Path) -> None:
    """Builds of earlier sources or Spark versions. A JVM that already loaded one keeps
    reading it: it holds the jar open, and an open file outlives its name."""
    for stale in current.parent.glob("connector-*"):
        if stale != current:
            shutil.rmtree(stale, ignore_errors=True)


def main() -> None:
    try:
        for jar in connector_jars():
            print(jar)
    except ConnectorBuildError as exc:
        sys.exit(f"plateau's Spark connector could not be built: {exc}")


if __name__ == "__main__":
    main()
