"""The JVM half of the source: a Spark SQL extension compiled once from its Java source.

Spark 4.3 caches a Python data source's read plan per loaded DataFrame, so a query without
filters after one with filters reads the filtered rows, and every query keeps the first
segment list (see jvm/PlateauExtensions.java). The extension clears that cache before each
query plans its scan. It needs javac (any JDK 17+) the first time; the jar is kept in the
cache folder, keyed by the source and the Spark version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pyspark

from plateau_core.cache import default_cache_dir
from plateau_core.errors import PlateauError

EXTENSION_CLASS = "org.plateau.spark.PlateauExtensions"
_SOURCE = Path(__file__).with_name("jvm") / "PlateauExtensions.java"


class ExtensionBuildError(PlateauError):
    """The Spark extension could not be compiled (no JDK, or Spark's jars not found)."""


def spark_jars_dir() -> Path:
    home = os.environ.get("SPARK_HOME")
    for candidate in ([Path(home) / "jars"] if home else []) + [
        Path(pyspark.__file__).parent / "jars"
    ]:
        if candidate.is_dir():
            return candidate
    raise ExtensionBuildError("cannot find Spark's jars (set SPARK_HOME)")


def extension_jar() -> Path:
    """The extension's jar, compiled on first use."""
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(source + pyspark.__version__.encode()).hexdigest()[:16]
    jar = default_cache_dir() / "spark" / f"plateau-spark-{key}.jar"
    if jar.is_file():
        return jar
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar_tool is None:
        raise ExtensionBuildError("javac and jar (a JDK 17+) are needed to build it once")
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as work:
        classes = Path(work) / "classes"
        classes.mkdir()
        classpath = str(spark_jars_dir() / "*")
        _run([javac, "-nowarn", "-d", str(classes), "-cp", classpath, str(_SOURCE)])
        built = Path(work) / jar.name
        _run([jar_tool, "cf", str(built), "-C", str(classes), "."])
        # Atomic: several processes starting at once each build, one rename wins.
        built.replace(jar)
    return jar


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    if result.returncode != 0:
        raise ExtensionBuildError(
            f"{Path(command[0]).name} failed ({result.returncode}): {result.stderr.strip()[-2000:]}"
        )
