"""A replication run as one Spark job: the pending segments read through the `plateau`
connector (one Spark task per replication task, so each writes one file per UTC date) and
written by Spark's own Parquet writer into a staging folder; then each file is given its
final name (`{first:020d}-{last:020d}.parquet`, offsets taken from its footer) in the target.

Staging is inside the target root for file:// targets (the final step is a rename on the same
file system) and in a local temporary folder for s3:// (the final step is an upload). Either
way the driver and the executors must see the staging folder: local mode, or a shared mount.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import date
from functools import reduce
from pathlib import Path
from typing import IO, TYPE_CHECKING

import pyarrow.parquet as pq
from pyarrow import fs
from pyspark.sql import functions as fn

from plateau_core.names import fsync_path
from plateau_core.schema import OFFSET
from plateau_spark.replication.files import (
    ReplicaFile,
    ReplicaTask,
    replica_columns,
    replica_name,
)
from plateau_spark.replication.target import STAGING_DIR, Target, TargetError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Spark's writer settings for the run: millisecond data kept as standard Parquet timestamps,
# and one open file per (date, partition) instead of a sort of every task's rows by them.
_WRITE_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.maxConcurrentOutputFileWriters": "64",
    # The date folders are UTC dates, whatever the session's own zone: a crashed run's
    # files are found (and the planned days listed) by UTC date.
    "spark.sql.session.timeZone": "UTC",
}
_ONE_TASK = str(2**63 - 1)  # maxPartitionBytes: a replication task's segments in one Spark task
# replication.compression names pyarrow's codecs: its lz4 is Parquet's LZ4_RAW, which Spark
# calls lz4_raw (Spark's lz4 is the older Hadoop framing few readers take).
_SPARK_CODECS = {"lz4": "lz4_raw"}


def run_spark(
    spark: SparkSession,
    tasks: list[ReplicaTask],
    manifest_url: str | None,
    compression: str,
) -> list[list[ReplicaFile]]:
    """Write the tasks' rows; returns each task's files, in task order.

    One Spark write per topic: a staged file is told apart by its date and partition
    folders, which two topics share, and topics have columns of their own."""
    target = tasks[0].target
    by_task: list[list[ReplicaFile]] = [[] for _ in tasks]
    with _staging(target) as staging, _conf(spark):
        filesystem = target.filesystem()
        topics = sorted({task.topic for task in tasks})
        for number, topic in enumerate(topics):
            indexes = [i for i, task in enumerate(tasks) if task.topic == topic]
            ours = [tasks[i] for i in indexes]
            folder = staging / f"topic-{number}"
            _write_topic(spark, ours, manifest_url, compression, folder)
            for staged_file in _staged_files(folder):
                index, replica = _publish(target, filesystem, ours, staged_file)
                by_task[indexes[index]].append(replica)
    return [sorted(f, key=lambda r: r.path) for f in by_task]


def _write_topic(
    spark: SparkSession,
    tasks: list[ReplicaTask],
    manifest_url: str | None,
    compression: str,
    folder: Path,
) -> None:
    frames = [_task_frame(spark, task, manifest_url) for task in tasks]
    # The same topic's schema in every frame, unless a segment with new columns was sealed
    # between two loads.
    rows = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    context = spark.sparkContext
    context.setJobDescription(
        f"plateau replicate: {tasks[0].topic}, {len(tasks)} files' worth of segments"
    )
    try:
        (
            rows.withColumn("date", fn.to_date(fn.col("timestamp")))
            .write.partitionBy("date", "partition")
            .option("compression", _SPARK_CODECS.get(compression, compression))
            # pyarrow's level (Arrow's default), which the in-process writer uses: Parquet's
            # default of 3 took 40% longer here for files 2% smaller.
            .option("parquet.compression.codec.zstd.level", "1")
            .mode("overwrite")
            .parquet(str(folder))
        )
    finally:
        context.setJobDescription(None)  # type: ignore[arg-type]


def _task_frame(spark: SparkSession, task: ReplicaTask, manifest_url: str | None) -> DataFrame:
    reader = (
        spark.read.format("plateau")
        .option("path", task.data_dir)
        .option("topic", task.topic)
        .option("maxPartitionBytes", _ONE_TASK)
    )
    if manifest_url:
        reader = reader.option("manifest", manifest_url)
    frame = reader.load()
    # The connector's own `partition` comes first; a data column named `date` is renamed by
    # position, as a name would resolve to it and to the `date` column the writer adds.
    own, *data = frame.columns
    names = [own, *replica_columns(data)]
    if names != frame.columns:
        frame = frame.toDF(*names)
    # A task's segments are a contiguous run of one partition: these bounds select exactly
    # them (the connector plans them from the manifest, whole, without a row filter).
    return frame.filter(
        (fn.col("partition") == task.partition)
        & (fn.col(OFFSET) >= task.start_offset)
        & (fn.col(OFFSET) < task.end_offset)
    )


def _staged_files(staging: Path) -> Iterator[tuple[Path, str, int]]:
    """(file, date, partition) of each Parquet file Spark wrote."""
    for path in sorted(staging.glob("date=*/partition=*/*.parquet")):
        day = path.parent.parent.name.removeprefix("date=")
        yield path, day, int(path.parent.name.removeprefix("partition="))


def _publish(
    target: Target,
    filesystem: fs.FileSystem,
    tasks: list[ReplicaTask],
    staged_file: tuple[Path, str, int],
) -> tuple[int, ReplicaFile]:
    """Move a staged file to its final name; (its task's index, the file)."""
    staged, day, partition = staged_file
    metadata = pq.ParquetFile(staged).metadata
    column = metadata.schema.names.index(OFFSET)
    lows, highs = [], []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(column).statistics
        lows.append(stats.min)
        highs.append(stats.max)
    first, last = int(min(lows)), int(max(highs))
    index = next(
        i
        for i, t in enumerate(tasks)
        if t.partition == partition and t.start_offset <= first < t.end_offset
    )
    task = tasks[index]
    relative = replica_name(task.topic, date.fromisoformat(day), partition, first, last)
    if target.scheme == "file":
        size = _rename_durably(staged, Path(target.path(relative)))
    else:
        try:
            size = target.write(filesystem, relative, lambda out: _copy(staged, out))
        except OSError as exc:  # pyarrow's S3 errors are OSErrors
            raise TargetError(f"cannot write {target.uri}/{relative}: {exc}") from exc
    return index, ReplicaFile(relative, metadata.num_rows, size, first, last)


def _copy(source: Path, out: IO[bytes]) -> None:
    with source.open("rb") as handle:
        shutil.copyfileobj(handle, out, 8 << 20)


def _rename_durably(staged: Path, final: Path) -> int:
    """Spark's writer does not sync its files: sync, rename, sync the folder."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fsync_path(staged)
    staged.replace(final)
    fsync_path(final.parent)
    return final.stat().st_size


@contextmanager
def _staging(target: Target) -> Iterator[Path]:
    if target.scheme == "file":
        base = Path(target.root) / target.staging
        # The store's own folder (Target.for_store), and its runs hold its replication lock:
        # what is staged here was left by a killed run of it.
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True, exist_ok=True)
        folder = base / uuid.uuid4().hex
    else:
        base = Path(tempfile.mkdtemp(prefix="plateau-replicate-"))
        folder = base / "staged"
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if target.scheme != "file":
            shutil.rmtree(base, ignore_errors=True)
        else:
            # Each is left when another run is staging in it (another store's, in the second).
            for empty in (base, Path(target.root) / STAGING_DIR):
                with suppress(OSError):
                    empty.rmdir()


@contextmanager
def _conf(spark: SparkSession) -> Iterator[None]:
    before = {key: spark.conf.get(key) for key in _WRITE_CONF}  # the defaults when unset
    for key, value in _WRITE_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)
