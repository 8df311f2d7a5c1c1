"""Building the Spark connector: the cache key, Spark's jars by name, and the error that names
what is missing (no Spark session needed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from plateau_spark import connector_build
from plateau_spark.connector_build import ConnectorBuildError, connector_jars, source_key


def test_missing_maven_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PLATEAU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # neither mvn nor javac
    with pytest.raises(ConnectorBuildError, match=r"Maven \(mvn\) is needed"):
        connector_jars()


def test_the_key_follows_the_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    copy = tmp_path / "connector"
    shutil.copytree(connector_build.SOURCE_DIR, copy, ignore=shutil.ignore_patterns("target"))
    monkeypatch.setattr(connector_build, "SOURCE_DIR", copy)
    before = source_key()
    assert source_key() == before
    (copy / "pom.xml").write_text((copy / "pom.xml").read_text() + "\n")
    assert source_key() != before


def test_spark_jars_are_found_by_their_exact_name(tmp_path: Path) -> None:
    for name in ("spark-sql_2.13-4.3.0.jar", "spark-sql-api_2.13-4.3.0.jar", "lz4-java-1.11.0.jar"):
        (tmp_path / name).touch()
    find = connector_build._compile_jar
    assert find(tmp_path, "spark-sql").name == "spark-sql_2.13-4.3.0.jar"
    assert find(tmp_path, "spark-sql-api").name == "spark-sql-api_2.13-4.3.0.jar"
    assert find(tmp_path, "lz4-java").name == "lz4-java-1.11.0.jar"
    with pytest.raises(ConnectorBuildError, match=r"no arrow-vector-<version>\.jar"):
        find(tmp_path, "arrow-vector")


def test_a_new_build_keeps_an_earlier_one_a_running_process_uses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Two plateau versions sharing a cache (an upgrade while `plateau replicate` runs): the
    # running JVM opens its connector jar again by name whenever Spark looks a data source
    # up, so removing the build under it fails its next query or replication run.
    cache = tmp_path / "cache"
    monkeypatch.setenv("PLATEAU_CACHE_DIR", str(cache))
    in_use = cache / "spark" / f"connector-{source_key()}"
    in_use.mkdir(parents=True)
    (in_use / connector_build.CONNECTOR_JAR).write_bytes(b"jar")
    user = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from plateau_spark.connector_build import connector_jars\n"
            "print(len(connector_jars()), flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert user.stdout is not None and user.stdout.readline().strip() == "1"
        newer = cache / "spark" / "connector-0123456789abcdef"
        newer.mkdir()
        (newer / connector_build.CONNECTOR_JAR).write_bytes(b"newer jar")
        connector_build._remove_stale(newer)
        assert (in_use / connector_build.CONNECTOR_JAR).read_bytes() == b"jar"
    finally:
        user.communicate("")
    assert user.returncode == 0
    connector_build._remove_stale(newer)
    assert not in_use.exists() and newer.is_dir()
