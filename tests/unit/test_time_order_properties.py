"""Property-based tests of `Store.read(..., order_by="timestamp")` against an in-memory model.

Hypothesis generates a few partitions of rows whose timestamps go up, down and repeat (Kafka
timestamps are the producers' and need not rise), writes them through a real Writer with a
small roll size, and checks reads with a limit (or none), either order, and sometimes a time
range, a `where` condition or a projection:

- the timestamps returned are exactly the model's first `limit` timestamps in that order;
- every row returned is a model row that passes the filters (no row twice), so ties at the
  k-th timestamp may be any of the tied rows but nothing else;
- a segment wholly beyond the k-th timestamp is never opened.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plateau_core import RollPolicy, Store, WriterPolicy

TOPIC = "timed"
BASE_MS = 1_700_000_000_000
TS = pa.timestamp("ms", tz="UTC")

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Row:
    partition: int
    offset: int
    timestamp: int
    level: str

    @property
    def uid(self) -> str:
        return f"{self.partition}-{self.offset}"


@st.composite
def partition_rows(draw: st.DrawFn, partition: int) -> list[list[Row]]:
    batches: list[list[Row]] = []
    offset = 0
    clock = draw(st.integers(0, 50))
    for _ in range(draw(st.integers(1, 5))):
        rows = []
        for _ in range(draw(st.integers(1, 15))):
            clock = max(0, clock + draw(st.integers(-6, 8)))
            rows.append(Row(partition, offset, clock, draw(st.sampled_from(["INFO", "ERROR"]))))
            offset += 1
        batches.append(rows)
    return batches


def to_arrow(rows: list[Row]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "offset": pa.array([r.offset for r in rows], pa.int64()),
            "timestamp": pa.array([BASE_MS + r.timestamp for r in rows], TS),
            "level": pa.array([r.level for r in rows]),
            "uid": pa.array([r.uid for r in rows]),
        }
    )


@dataclass(frozen=True)
class Query:
    limit: int | None
    order: Literal["asc", "desc"]
    time_start: int | None
    level: str | None
    project: bool

    def keeps(self, row: Row) -> bool:
        return (self.time_start is None or row.timestamp >= self.time_start) and (
            self.level is None or row.level == self.level
        )


QUERIES = st.builds(
    Query,
    limit=st.one_of(st.none(), st.integers(0, 40)),
    order=st.sampled_from(["asc", "desc"]),
    time_start=st.one_of(st.none(), st.integers(0, 80)),
    level=st.one_of(st.none(), st.sampled_from(["INFO", "ERROR"])),
    project=st.booleans(),
)


@given(
    data=st.sets(st.integers(0, 2), min_size=1, max_size=3).flatmap(
        lambda parts: st.fixed_dictionaries({p: partition_rows(p) for p in sorted(parts)})
    ),
    max_rows=st.integers(1, 10),
    queries=st.lists(QUERIES, min_size=1, max_size=5),
)
@SETTINGS
def test_time_ordered_reads_match_the_model(
    data: dict[int, list[list[Row]]], max_rows: int, queries: list[Query]
) -> None:
    model = [row for batches in data.values() for rows in batches for row in rows]
    by_uid = {r.uid: r for r in model}
    with (
        tempfile.TemporaryDirectory(prefix="plateau-time-order-") as tmp,
        Store.open(Path(tmp) / "data") as store,
    ):
        writer = store.writer(WriterPolicy(writer_threads=1))
        try:
            for partition, batches in data.items():
                writer.acquire(TOPIC, partition, roll=RollPolicy(max_rows=max_rows))
                for rows in batches:
                    writer.append(TOPIC, partition, to_arrow(rows))
                    writer.flush()
        finally:
            writer.close()
        segments = store.manifest.segments(TOPIC)
        for query in queries:
            kept = [r for r in model if query.keeps(r)]
            times = sorted((r.timestamp for r in kept), reverse=query.order == "desc")
            expected = times if query.limit is None else times[: query.limit]
            result = store.read(
                TOPIC,
                order_by="timestamp",
                order=query.order,
                limit=query.limit,
                time_start=None if query.time_start is None else BASE_MS + query.time_start,
                where=None if query.level is None else {"level": query.level},
                columns=["uid", "timestamp"] if query.project else None,
            )
            table = result.to_table()
            got = [t.timestamp() * 1000 - BASE_MS for t in table.column("timestamp").to_pylist()]
            assert [round(t) for t in got] == expected, query
            uids = table.column("uid").to_pylist()
            assert max(Counter(uids).values(), default=1) == 1
            for uid, timestamp in zip(uids, expected, strict=True):
                assert by_uid[uid].timestamp == timestamp and query.keeps(by_uid[uid])
            if query.limit and expected and len(expected) == query.limit:
                kth = BASE_MS + expected[-1]
                beyond = {
                    s.path
                    for s in segments
                    if (s.time_max < kth if query.order == "desc" else s.time_min > kth)
                }
                assert not beyond & set(result.opened), query
            if query.project:
                assert table.column_names == ["uid", "timestamp"]
