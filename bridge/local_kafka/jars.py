"""Resolve the Apache Kafka broker jars with Maven, once, into a cache folder."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import structlog

from bridge.errors import LocalKafkaError
from plateau_core.cache import default_cache_dir

DEFAULT_KAFKA_VERSION = "4.1.2"
# Named per jar set: a cache fetched for an older pom (without the tools jar) is fetched again.
_COMPLETE_MARKER = ".complete-with-tools"

log = structlog.get_logger(__name__)


def kafka_libs(version: str = DEFAULT_KAFKA_VERSION, cache_dir: Path | None = None) -> Path:
    """The folder holding every jar the broker needs, fetching it first if it is missing.

    `PLATEAU_KAFKA_LIBS` points at an existing Kafka distribution's `libs/` instead.
    """
    override = os.environ.get("PLATEAU_KAFKA_LIBS")
    if override:
        libs = Path(override).expanduser()
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise LocalKafkaError(f"PLATEAU_KAFKA_LIBS={override} holds no kafka_2.13-*.jar")
        return libs
    root = (cache_dir or default_cache_dir()) / "kafka" / version
    libs = root / "libs"
    if (root / _COMPLETE_MARKER).exists():
        return libs
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root.parent / f"{version}.lock"):
        # Another process may have finished the download while this one waited for the lock.
        if not (root / _COMPLETE_MARKER).exists():
            _fetch(version, libs)
            (root / _COMPLETE_MARKER).write_text(version + "\n")
    return libs


def _fetch(version: str, libs: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalKafkaError(
            "Maven (mvn) is not on PATH; it is needed once to fetch the Kafka broker jars"
        )
    started = time.monotonic()
    log.info("kafka_jars_fetch", kafka_version=version, target=str(libs))
    with tempfile.TemporaryDirectory(prefix="plateau-kafka-pom-") as build:
        pom = Path(build) / "pom.xml"
        pom.write_bytes(resources.files(__package__).joinpath("pom.xml").read_bytes())
        staging = libs.with_name(libs.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            f"-Dkafka.version={version}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            raise LocalKafkaError(
                f"Maven could not resolve org.apache.kafka:kafka_2.13:{version} "
                f"(exit {done.returncode}):\n{tail}"
            )
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
    log.info(
        "kafka_jars_ready",
        kafka_version=version,
        jars=sum(1 for _ in libs.glob("*.jar")),
        seconds=round(time.monotonic() - started, 1),
    )


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
