"""Property-based tests of offset and time range reads against an in-memory model.

Hypothesis generates a few partitions of batches (gaps between batches, multi-row messages
sharing an offset, non-decreasing timestamps, keys that are sometimes null), writes them
through a real Writer with a small roll size so every partition gets several segments,
and then checks `Store.read` against the plain list of rows that were written:

- the rows returned are exactly the model rows with start_offset <= offset < end_offset
  and time_start <= timestamp < time_end (as a multiset, each partition in offset order,
  descending for order="desc");
- with a limit, the rows are the first `limit` of that order (exactly so when the matches
  come from one partition, a per-partition prefix otherwise);
- the reader opened only segments that overlap the requested ranges, and every segment
  that holds a matching row;
- the manifest's segments and spans describe the model exactly.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, TypeVar

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from plateau_core import (
    BackpressureError,
    ReadResult,
    RollPolicy,
    SegmentRecord,
    Store,
    Writer,
    WriterPolicy,
)

TOPIC = "props"
BASE_MS = 1_700_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
ALL_COLUMNS = ("offset", "timestamp", "key", "value")
MAX_BATCH_ROWS = 30
APPEND_TIMEOUT_S = 30.0

KeyMode = Literal["binary", "null_type"]
Order = Literal["asc", "desc"]
Projected = tuple[object, ...]
T = TypeVar("T")

PROPERTY_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One written record; `seq` is its insert position within its partition."""

    partition: int
    seq: int
    offset: int
    timestamp: int  # epoch ms
    key: bytes | None
    value: bytes  # unique per row, so a returned row can be traced back to the model

    def project(self, columns: Sequence[str]) -> Projected:
        return tuple(getattr(self, name) for name in columns)


@dataclass(frozen=True)
class Batch:
    partition: int
    rows: tuple[Row, ...]
    key_mode: KeyMode  # "null_type": the key column is Arrow's null type (every key null)

    def to_arrow(self) -> pa.RecordBatch:
        keys = [r.key for r in self.rows]
        key_array = (
            pa.nulls(len(keys)) if self.key_mode == "null_type" else pa.array(keys, pa.binary())
        )
        return pa.RecordBatch.from_pydict(
            {
                "offset": pa.array([r.offset for r in self.rows], pa.int64()),
                "timestamp": pa.array([r.timestamp for r in self.rows], TIMESTAMP_TYPE),
                "key": key_array,
                "value": pa.array([r.value for r in self.rows], pa.binary()),
            }
        )


@dataclass(frozen=True)
class Dataset:
    """What one example writes: batches in append order, and the writer's settings."""

    partitions: tuple[int, ...]
    batches: tuple[Batch, ...]
    max_rows: int
    memory_budget_bytes: int
    writer_threads: int
    compression: Literal["lz4", "zstd", "none"]

    @property
    def rows(self) -> list[Row]:
        return [row for batch in self.batches for row in batch.rows]

    def partition_rows(self, partition: int) -> list[Row]:
        return [row for row in self.rows if row.partition == partition]


@dataclass(frozen=True)
class Query:
    partitions: list[int] | None
    start_offset: int | None
    end_offset: int | None
    time_start: int | None
    time_end: int | None
    columns: list[str] | None
    limit: int | None
    order: Order

    def matches(self, row: Row) -> bool:
        return (
            (self.partitions is None or row.partition in self.partitions)
            and (self.start_offset is None or row.offset >= self.start_offset)
            and (self.end_offset is None or row.offset < self.end_offset)
            and (self.time_start is None or row.timestamp >= self.time_start)
            and (self.time_end is None or row.timestamp < self.time_end)
        )

    def overlaps(self, segment: SegmentRecord) -> bool:
        """Whether the segment's offset span [start, end) and time span [min, max] meet the
        requested ranges (what pruning may not skip, and all it may open)."""
        return (
            (self.partitions is None or segment.partition in self.partitions)
            and (self.start_offset is None or segment.end_offset > self.start_offset)
            and (self.end_offset is None or segment.start_offset < self.end_offset)
            and (self.time_start is None or segment.time_max >= self.time_start)
            and (self.time_end is None or segment.time_min < self.time_end)
        )

    def ordered(self, rows: Iterable[Row]) -> list[Row]:
        """Model rows in the order a read returns them within one partition."""
        ordered = sorted(rows, key=lambda r: r.seq)
        return ordered[::-1] if self.order == "desc" else ordered


# --- strategies --------------------------------------------------------------------------------


@st.composite
def partition_batches(draw: st.DrawFn, partition: int) -> list[Batch]:
    """A partition's batches: offsets strictly increasing across batches (gaps allowed),
    non-decreasing inside one (rows of a multi-row message share an offset), timestamps
    non-decreasing throughout."""
    next_offset = draw(st.integers(0, 40))
    timestamp = BASE_MS + draw(st.integers(0, 5_000))
    seq = 0
    batches: list[Batch] = []
    for _ in range(draw(st.integers(1, 6))):
        next_offset += draw(st.integers(0, 3))  # gap before the batch
        size = draw(st.integers(1, MAX_BATCH_ROWS))
        offset_steps = draw(st.lists(st.integers(0, 2), min_size=size - 1, max_size=size - 1))
        time_steps = draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))
        key_mode: KeyMode = draw(st.sampled_from(["binary", "binary", "null_type"]))
        null_keys = (
            [True] * size
            if key_mode == "null_type"
            else draw(st.lists(st.booleans(), min_size=size, max_size=size))
        )
        rows: list[Row] = []
        offset = next_offset
        for i in range(size):
            if i > 0:
                offset += offset_steps[i - 1]
            timestamp += time_steps[i]
            rows.append(
                Row(
                    partition=partition,
                    seq=seq,
                    offset=offset,
                    timestamp=timestamp,
                    key=None if null_keys[i] else f"k{offset % 5}".encode(),
                    value=f"p{partition}-{seq}".encode(),
                )
            )
            seq += 1
        batches.append(Batch(partition, tuple(rows), key_mode))
        next_offset = offset + 1
    return batches


@st.composite
def datasets(draw: st.DrawFn, max_partitions: int = 3) -> Dataset:
    chosen = st.sets(st.integers(0, 5), min_size=1, max_size=max_partitions)
    partitions = tuple(sorted(draw(chosen)))
    per_partition = {p: draw(partition_batches(p)) for p in partitions}
    # Interleave the partitions' appends in a drawn order, each partition's own order kept.
    turns = draw(st.permutations([p for p in partitions for _ in per_partition[p]]))
    queues = {p: list(batches) for p, batches in per_partition.items()}
    ordered = tuple(queues[p].pop(0) for p in turns)
    return Dataset(
        partitions=partitions,
        batches=ordered,
        max_rows=draw(st.integers(1, 25)),
        # A small budget makes appends hit memory backpressure and seal early.
        memory_budget_bytes=draw(st.sampled_from([1_500, 8_000, 512 * 1024 * 1024])),
        writer_threads=draw(st.integers(1, 2)),
        compression=draw(st.sampled_from(["lz4", "zstd", "none"])),
    )


def optional(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T | None]:
    return st.one_of(st.none(), strategy)


def bounds(values: Iterable[int], edges: Iterable[int]) -> st.SearchStrategy[int]:
    """Bounds that land on, next to or between written values, favouring segment edges
    (where pruning and whole-segment shortcuts can be off by one)."""
    near_edges = sorted({e + d for e in edges for d in (-1, 0, 1)})
    written = sorted(set(values))
    return st.one_of(
        pick(near_edges),
        pick(written),
        st.integers(written[0] - 2, written[-1] + 2),
    )


def pick(choices: Sequence[int]) -> st.SearchStrategy[int]:
    """One of `choices`, drawn the same way whatever their number: segment edges depend on
    when seals ran, and hypothesis replays an example expecting the same draws."""
    return st.integers(0, 2**16).map(lambda i: choices[i % len(choices)])


def queries(
    dataset: Dataset, segments: Sequence[SegmentRecord], *, limited: bool = False
) -> st.SearchStrategy[Query]:
    """Random reads of the dataset; `limited` always sets a limit."""
    rows = dataset.rows
    offsets = bounds(
        (r.offset for r in rows), (e for s in segments for e in (s.start_offset, s.end_offset))
    )
    times = bounds(
        (r.timestamp for r in rows), (e for s in segments for e in (s.time_min, s.time_max))
    )
    partition_choices = [*dataset.partitions, 9]  # 9 is never written
    limit = st.integers(0, len(rows) + 2)
    return st.builds(
        Query,
        partitions=optional(st.lists(st.sampled_from(partition_choices), unique=True)),
        start_offset=optional(offsets),
        end_offset=optional(offsets),
        time_start=optional(times),
        time_end=optional(times),
        columns=optional(st.permutations(ALL_COLUMNS).flatmap(_prefixes)),
        limit=limit if limited else optional(limit),
        order=st.sampled_from(["asc", "desc"]),
    )


def _prefixes(columns: Sequence[str]) -> st.SearchStrategy[list[str]]:
    return st.integers(1, len(columns)).map(lambda n: list(columns[:n]))


# --- writing and reading -----------------------------------------------------------------------


def append_with_retry(writer: Writer, partition: int, batch: pa.RecordBatch) -> None:
    """Append, waiting out backpressure the way the bridge does (pause, retry later)."""
    deadline = time.monotonic() + APPEND_TIMEOUT_S
    while True:
        try:
            writer.append(TOPIC, partition, batch)
            return
        except BackpressureError:
            if time.monotonic() > deadline:
                raise
            # accepting() turns true once the seal in flight lands or memory is released;
            # even then the retry may be refused again, so always back off a little.
            time.sleep(0.001 if writer.accepting(TOPIC, partition) else 0.002)


def write_dataset(data_dir: Path, dataset: Dataset) -> None:
    with Store.open(data_dir) as store:
        writer = store.writer(
            WriterPolicy(
                memory_budget_bytes=dataset.memory_budget_bytes,
                writer_threads=dataset.writer_threads,
                compression=dataset.compression,
                fsync=False,
            )
        )
        try:
            roll = RollPolicy(max_rows=dataset.max_rows, max_age_s=3_600.0)
            for partition in dataset.partitions:
                assert writer.acquire(TOPIC, partition, roll=roll) is None
            for batch in dataset.batches:
                append_with_retry(writer, batch.partition, batch.to_arrow())
            writer.flush()
        finally:
            writer.close()


def read(store: Store, query: Query) -> ReadResult:
    return store.read(
        TOPIC,
        partitions=query.partitions,
        start_offset=query.start_offset,
        end_offset=query.end_offset,
        time_start=query.time_start,
        time_end=query.time_end,
        columns=query.columns,
        limit=query.limit,
        order=query.order,
    )


def table_rows(table: pa.Table) -> list[Projected]:
    """The table's rows as tuples in column order, timestamps as epoch ms."""
    columns = []
    for name in table.column_names:
        column = table.column(name)
        if name == "timestamp":
            assert column.type == TIMESTAMP_TYPE
            column = column.cast(pa.int64())
        columns.append(column.to_pylist())
    return list(zip(*columns, strict=True))


def with_store(dataset: Dataset, check: Callable[[Store], None]) -> None:
    """Write the dataset into a fresh folder, then run `check` on a freshly opened store."""
    with tempfile.TemporaryDirectory(prefix="plateau-props-") as tmp:
        data_dir = Path(tmp) / "data"
        write_dataset(data_dir, dataset)
        with Store.open(data_dir) as store:
            check(store)


# --- checks ------------------------------------------------------------------------------------


def check_manifest(store: Store, dataset: Dataset) -> None:
    """Segments tile each partition's rows exactly; spans agree with the model."""
    segments = store.manifest.segments(TOPIC)
    spans = {s.partition: s for s in store.spans(TOPIC)}
    assert sorted(spans) == list(dataset.partitions)
    for partition in dataset.partitions:
        rows = dataset.partition_rows(partition)
        mine = sorted(
            (s for s in segments if s.partition == partition), key=lambda s: s.start_offset
        )
        assert mine, f"partition {partition} has no segment"
        covered = 0
        for previous, segment in zip([None, *mine], mine, strict=False):
            if previous is not None:
                assert segment.start_offset >= previous.end_offset, "segments overlap"
            inside = [r for r in rows if segment.start_offset <= r.offset < segment.end_offset]
            assert inside, f"segment {segment.path} holds no model row"
            assert segment.record_count == len(inside)
            assert segment.start_offset == inside[0].offset
            assert segment.end_offset == inside[-1].offset + 1
            assert segment.time_min == min(r.timestamp for r in inside)
            assert segment.time_max == max(r.timestamp for r in inside)
            # A buffer rolls as soon as it is full; at most one batch more arrives while the
            # previous seal is still being written.
            assert segment.record_count <= dataset.max_rows - 1 + MAX_BATCH_ROWS
            covered += len(inside)
        assert covered == len(rows), "some rows are in no segment"

        span = spans[partition]
        assert span.next_offset == rows[-1].offset + 1
        assert span.records == len(rows)
        assert span.segments == len(mine)
        assert span.start_offset == rows[0].offset
        assert span.time_min == min(r.timestamp for r in rows)
        assert span.time_max == max(r.timestamp for r in rows)
        assert span.bytes == sum(s.size_bytes for s in mine)
        assert span.replicated_offset == 0


def check_read(store: Store, dataset: Dataset, query: Query) -> None:
    result = read(store, query)
    table = result.to_table()
    names = table.column_names
    if query.columns is None:
        assert names[:2] == ["offset", "timestamp"]
        assert sorted(names) == sorted(ALL_COLUMNS)
    else:
        assert names == query.columns
    got = table_rows(table)
    matches = [r for r in dataset.rows if query.matches(r)]
    by_partition = {
        p: query.ordered(r for r in matches if r.partition == p) for p in dataset.partitions
    }
    by_value = {r.value: r for r in dataset.rows}

    if query.limit is None:
        assert Counter(got) == Counter(r.project(names) for r in matches)
    else:
        assert len(got) == min(query.limit, len(matches))
        assert not Counter(got) - Counter(r.project(names) for r in matches)
        if len({r.partition for r in matches}) <= 1:
            # One partition's rows: exactly the first `limit` of asc / desc offset order.
            ordered = query.ordered(matches)[: query.limit]
            assert got == [r.project(names) for r in ordered]

    if "value" in names:
        # Trace each returned row to the model row it came from: in every partition the
        # rows come in offset order (reversed for desc); a limit cuts each one's prefix.
        returned = [by_value[row[names.index("value")]] for row in got]
        for row, projected in zip(returned, got, strict=True):
            assert row.project(names) == projected
        for partition, expected in by_partition.items():
            seen = [r for r in returned if r.partition == partition]
            assert seen == expected[: len(seen)]
            if query.limit is None:
                assert len(seen) == len(expected)

    check_pruning(store, dataset, query, result)


def check_pruning(store: Store, dataset: Dataset, query: Query, result: ReadResult) -> None:
    """Opened segments meet the requested ranges; none holding a match was skipped."""
    segments = {s.path: s for s in store.manifest.segments(TOPIC)}
    assert len(set(result.opened)) == len(result.opened), "a segment was opened twice"
    for path in result.opened:
        assert path in segments
        assert query.overlaps(segments[path]), f"opened {path} outside the requested ranges"
    if query.limit == 0:
        assert result.opened == []
    if query.limit is not None:
        return
    for segment in segments.values():
        holds_match = any(
            r.partition == segment.partition
            and segment.start_offset <= r.offset < segment.end_offset
            and query.matches(r)
            for r in dataset.rows
        )
        if holds_match:
            assert segment.path in result.opened, f"{segment.path} holds matches, not opened"


# --- properties --------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(dataset=datasets(), data=st.data())
def test_reads_match_the_model(dataset: Dataset, data: st.DataObject) -> None:
    """Random offset/time/partition/column/limit/order reads return the model's rows."""

    def check(store: Store) -> None:
        check_manifest(store, dataset)
        # A full read first: everything written comes back.
        check_read(store, dataset, Query(None, None, None, None, None, None, None, "asc"))
        segments = store.manifest.segments(TOPIC)
        reads = st.lists(queries(dataset, segments), min_size=1, max_size=12)
        for query in data.draw(reads, "queries"):
            check_read(store, dataset, query)

    with_store(dataset, check)


@PROPERTY_SETTINGS
@given(dataset=datasets(max_partitions=1), data=st.data())
def test_limit_on_one_partition_takes_the_ends(dataset: Dataset, data: st.DataObject) -> None:
    """On a single-partition store, desc + limit gives the `limit` highest offsets (ties
    within one offset in reverse insert order) and asc + limit the lowest ones."""
    rows = dataset.rows

    def check(store: Store) -> None:
        for order in ("asc", "desc"):
            limit = data.draw(st.integers(0, len(rows) + 2), f"limit {order}")
            query = Query(None, None, None, None, None, None, limit, order)
            got = table_rows(read(store, query).to_table())
            expected = rows[:limit] if order == "asc" else rows[::-1][:limit]
            assert got == [r.project(ALL_COLUMNS) for r in expected]
        segments = store.manifest.segments(TOPIC)
        reads = st.lists(queries(dataset, segments, limited=True), max_size=6)
        for query in data.draw(reads, "queries"):
            check_read(store, dataset, query)

    with_store(dataset, check)


def _at_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


@settings(max_examples=40, deadline=None)
@given(ms=st.integers(0, 4_102_444_800_000), naive=st.booleans())
@example(ms=269_107_111_113, naive=False)  # 1978-07-12T15:58:31.113Z
def test_datetime_bounds_equal_epoch_ms_bounds(ms: int, naive: bool) -> None:
    """A time bound given as a datetime selects exactly what the same instant in epoch
    milliseconds selects (naive datetimes are UTC)."""
    rows = [
        Row(0, seq, seq, ms - 1 + seq, None, f"p0-{seq}".encode()) for seq in range(3)
    ]  # timestamps ms-1, ms, ms+1
    dataset = Dataset((0,), (Batch(0, tuple(rows), "binary"),), 10, 512 * 1024 * 1024, 1, "none")
    bound = _at_ms(ms)
    if naive:
        bound = bound.replace(tzinfo=None)

    def check(store: Store) -> None:
        def offsets(start: datetime | int | None, end: datetime | int | None) -> list[int]:
            table = store.read(TOPIC, time_start=start, time_end=end).to_table()
            return [int(o) for o in table.column("offset").to_pylist()]

        assert offsets(ms, None) == [1, 2]
        assert offsets(None, ms) == [0]
        assert offsets(bound, None) == [1, 2], f"time_start={bound.isoformat()} vs {ms} ms"
        assert offsets(None, bound) == [0], f"time_end={bound.isoformat()} vs {ms} ms"

    with_store(dataset, check)
