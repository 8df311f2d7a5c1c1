"""The JVM connector behind `spark.read.format("plateau")`, built from its Java source once.

`plateau_spark/connector/` is a Maven project. It compiles against the jars of the Spark that
will load it (pyspark's, or $SPARK_HOME's), passed to Maven by path, so the classes match that
Spark exactly; Maven fetches the SQLite and PostgreSQL JDBC drivers. The jars land in the cache
folder under a key made of the source and the Spark version: an edited source or another Spark
builds anew.

    make spark-connector        # runs main() below
"""

from __future__ import annotations

import fcntl
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
# connector-<key>.in-use is held shared by each process using that build, for its lifetime; a
# build of another key removes it only when it can take it exclusively.
IN_USE_SUFFIX = ".in-use"
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
# Open lock files of the builds this process uses (-1: none could be made): closing one
# would release its lock.
_held: dict[Path, int] = {}

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
    """The connector's jar and the JDBC drivers it needs, built on first use, and kept while
    this process runs: Spark opens the jar again by its name whenever it looks a data source
    up, so a build of another source or Spark version must not remove it meanwhile."""
    folder = default_cache_dir() / "spark" / f"connector-{source_key()}"
    while folder not in _held:
        if not (folder / CONNECTOR_JAR).is_file():
            _build(folder)
        _held_if_still_there(folder)
    return sorted(folder.glob("*.jar"))


def _lock_path(folder: Path) -> Path:
    # Beside the folder, not in it: it outlives the folder's removal until it is unlinked.
    return folder.with_name(folder.name + IN_USE_SUFFIX)


def _held_if_still_there(folder: Path) -> None:
    lock = _lock_path(folder)
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        # A cache this user may not write to is not one a build of theirs removes from.
        _held[folder] = -1
        return
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        same = os.fstat(fd).st_ino == lock.stat().st_ino
    except FileNotFoundError:
        same = False
    if same and (folder / CONNECTOR_JAR).is_file():
        _held[folder] = fd
    else:
        # Removed as stale between the check and the lock: the caller builds it again.
        os.close(fd)


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
    """Builds of other sources or Spark versions that no running process uses."""
    for stale in current.parent.glob("connector-*"):
        if stale == current or not stale.is_dir():
            continue
        lock = _lock_path(stale)
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("spark_connector_kept_in_use", folder=str(stale))
        else:
            shutil.rmtree(stale, ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)


def main() -> None:
    try:
        for jar in connector_jars():
            print(jar)
    except ConnectorBuildError as exc:
        sys.exit(f"plateau's Spark connector could not be built: {exc}")


if __name__ == "__main__":
    main()
