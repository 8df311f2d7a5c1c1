"""Where an unfinished replication run's files are looked for: one listing per pending day,
or one listing of the whole tree when the days are many; either way one partition's files."""

from __future__ import annotations

from datetime import date, timedelta
from functools import partial
from pathlib import Path

import pytest

from plateau_spark.replication.files import replica_dir
from plateau_spark.replication.target import MAX_DAY_LISTINGS, Target


@pytest.mark.parametrize("day_count", [2, MAX_DAY_LISTINGS + 8])
def test_partition_files_by_day_folders_or_one_listing(tmp_path: Path, day_count: int) -> None:
    first = date(2026, 1, 1)
    days = [first + timedelta(days=i) for i in range(day_count)]
    for partition in (0, 1, 10):
        folder = tmp_path / replica_dir("t", days[1], partition)
        folder.mkdir(parents=True)
        (folder / f"00-{partition}.parquet").write_bytes(b"x")
    outside = tmp_path / replica_dir("t", first - timedelta(days=3), 0)
    outside.mkdir(parents=True)
    (outside / "old.parquet").write_bytes(b"x")
    target = Target.parse(str(tmp_path))
    found = sorted(
        target.partition_files(
            target.filesystem(), "t", days, partial(replica_dir, "t", partition=0), 0
        )
    )
    expected = [f"{replica_dir('t', days[1], 0)}/00-0.parquet"]
    if day_count > MAX_DAY_LISTINGS:  # the one listing sees every day of the partition
        expected.insert(0, f"{replica_dir('t', first - timedelta(days=3), 0)}/old.parquet")
    assert found == expected
