"""`plateau query` and `plateau replicate` from the command line."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from bridge.cli import main
from plateau_core import SegmentState, Store
from plateau_spark.replication import Replicator, Target
from tests.postgres_server import PostgresServer
from tests.spark.conftest import minute_batches, write_segments
from tests.spark.test_replication import spark_keys, stored_keys
from tests.support import batch


def config_file(tmp_path: Path, **replication: str) -> Path:
    lines = ["storage:", "  data_dir: data", "topics:", "  - source: web-clicks"]
    if replication:
        lines.append("replication:")
        lines += [f"  {key}: {value}" for key, value in replication.items()]
    path = tmp_path / "plateau.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def small_store(tmp_path: Path) -> Store:
    store = Store.open(tmp_path / "data")
    for partition in (0, 1):
        write_segments(store, "web-clicks", partition, minute_batches(partition, 3), 100)
    return store


def test_query_prints_writes_and_reports_sql_errors(
    spark: SparkSession,
    small_store: Store,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = config_file(tmp_path)
    sql = "SELECT partition, count(*) AS n FROM `web-clicks` GROUP BY partition ORDER BY 1"
    assert main(["query", "-c", str(config), sql]) == 0
    out = capsys.readouterr().out
    assert "| partition | n   |" in out and "| 1         | 300 |" in out and "2 rows" in out

    assert main(["query", "-c", str(config), sql, "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [{"partition": 0, "n": 300}, {"partition": 1, "n": 300}]

    detail = "SELECT offset, value, timestamp FROM `web-clicks` WHERE partition = 1 AND offset < 2"
    assert main(["query", "-c", str(config), detail, "--format", "csv"]) == 0
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert table[0] == ["offset", "value", "timestamp"]
    assert [r[0] for r in table[1:]] == ["0", "1"]

    target = tmp_path / "out.parquet"
    argv = ["query", "-c", str(config), "SELECT * FROM `web-clicks`", "--format", "parquet"]
    assert main([*argv, "--output", str(target)]) == 0
    assert pq.read_table(target).num_rows == 600
    assert target.stat().st_mode & 0o077 == 0

    assert main(["query", "-c", str(config), "SELECT nope FROM `web-clicks`"]) == 1
    err = capsys.readouterr().err
    assert "UNRESOLVED_COLUMN" in err and "`nope`" in err
    assert "Traceback" not in err and "JVM stacktrace" not in err
    assert main(["query", "-c", str(config), "SELEC 1"]) == 1
    assert "PARSE_SYNTAX_ERROR" in capsys.readouterr().err
    assert main([*argv]) == 2  # parquet without --output
    assert "needs --output" in capsys.readouterr().err


def test_replicate_without_target_is_refused(
    small_store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replicate", "-c", str(config_file(tmp_path)), "--once"]) == 2
    assert "no replication target" in capsys.readouterr().err


def test_replicate_killed_mid_run_then_rerun_has_no_duplicates(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "data")
    for partition in (0, 1):
        batches = [batch(range(i * 200, (i + 1) * 200)) for i in range(30)]
        write_segments(store, "web-clicks", partition, batches, roll_rows=200)
    replica = tmp_path / "replica"
    config = config_file(tmp_path, target=str(replica), file_size="1")  # a file per segment
    command = [sys.executable, "-m", "bridge.cli", "--log-level", "WARNING", "replicate"]
    command += ["-c", str(config), "--interval", "1h", "--master", "local[1]"]
    process = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 180
        # Files under their final names (Spark stages its output in _plateau_staging first).
        while not any((replica / "web-clicks").rglob("*.parquet")):
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "replicate wrote nothing within 180 s"
            time.sleep(0.02)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    states = Counter(s.state for s in store.manifest.segments("web-clicks"))
    written = len(list((replica / "web-clicks").rglob("*.parquet")))
    # Killed between files and the manifest commit: files exist, nothing is recorded.
    assert states == {SegmentState.SEALED: 60}
    assert 0 < written < 60

    report = Replicator(store, Target.parse(str(replica))).run_once(spark)
    assert report.orphans_removed == written
    assert spark_keys(spark, str(replica / "web-clicks")) == stored_keys(store, "web-clicks")
    store.close()


def test_query_and_replicate_with_a_postgresql_manifest(
    spark: SparkSession,
    tmp_path: Path,
    postgres: PostgresServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = postgres.new_database()
    with Store.open(tmp_path / "data", manifest_url=url) as store:
        for partition in (0, 1):
            write_segments(store, "web-clicks", partition, minute_batches(partition, 3), 100)
    capsys.readouterr()  # the writes' log lines
    config = config_file(tmp_path, target=str(tmp_path / "replica"))
    config.write_text(
        config.read_text().replace(
            "  data_dir: data\n", f"  data_dir: data\n  manifest_url: {url}\n"
        )
    )
    sql = "SELECT partition, count(*) AS n FROM `web-clicks` GROUP BY partition ORDER BY 1"
    assert main(["query", "-c", str(config), sql, "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [{"partition": 0, "n": 300}, {"partition": 1, "n": 300}]

    assert main(["replicate", "-c", str(config), "--once"]) == 0
    copied = pq.read_table(tmp_path / "replica")
    assert copied.num_rows == 600
    with Store.open(tmp_path / "data", manifest_url=url) as store:
        states = {s.state for s in store.manifest.segments("web-clicks")}
        assert states == {SegmentState.REPLICATED}
    assert not (tmp_path / "data" / "manifest.db").exists()


def test_replicate_refuses_a_produced_topic_another_store_fed_and_copies_the_rest(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The config consumes web-clicks from Kafka; orders is produced to plateau. The replica
    of each names another store: web-clicks is replicated all the same (Kafka's offsets
    name the same records in any store), orders is refused and the command says why."""
    with Store.open(tmp_path / "data") as store:
        write_segments(store, "web-clicks", 0, minute_batches(0, 1), 100)
        write_segments(store, "orders", 0, minute_batches(0, 1), 100)
    replica = tmp_path / "replica"
    for topic in ("web-clicks", "orders"):
        (replica / topic).mkdir(parents=True)
        (replica / topic / "_plateau_store_id").write_text("another-store\n")
    capsys.readouterr()  # the writes' log lines
    config = config_file(tmp_path, target=str(replica))

    assert main(["replicate", "-c", str(config), "--once"]) == 2
    err = capsys.readouterr().err
    assert "topic 'orders' is not replicated" in err and "another-store" in err
    with Store.open(tmp_path / "data") as store:
        assert {s.state for s in store.manifest.segments("web-clicks")} == {SegmentState.REPLICATED}
        assert {s.state for s in store.manifest.segments("orders")} == {SegmentState.SEALED}
    assert spark_keys(spark, str(replica / "web-clicks")) == Counter(
        {(0, o): 1 for o in range(100)}
    )
