"""Property-based tests of `Store.read(..., where=...)` against an in-memory model.

Hypothesis generates rows with a nullable key, a string column, an integer column and a
column some batches lack, writes them through a real Writer with a small roll size (so
there are many segments, with bounds that overlap or not), and checks for random equality
and IN conditions, alone or combined with offset bounds:

- the rows returned are exactly the model rows every condition keeps (a null equals
  nothing), whatever the segments the promoted statistics and bloom filters ruled out;
- every segment holding a matching row was opened: pruning never drops a row;
- the same read with pruning turned off returns the same rows.

Bloom filters are written at a false positive rate of 0.5 as well as 0.01, so false
positives are common and must still never cost a row.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyarrow import ipc

from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.names import relative_segment_path
from plateau_core.policies import IndexPolicy
from plateau_core.reader import ReadResult
from plateau_core.segment_file import write_segment

TOPIC = "needles"
BASE_MS = 1_700_000_000_000
TS = pa.timestamp("ms", tz="UTC")
RIDS = [f"r{i}" for i in range(12)]

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Row:
    partition: int
    offset: int
    key: bytes | None
    rid: str | None
    n: int
    extra: str | None  # None also where the batch has no such column

    @property
    def uid(self) -> str:
        return f"{self.partition}-{self.offset}"

    def get(self, column: str) -> object:
        return getattr(self, column)


@st.composite
def partition_rows(draw: st.DrawFn, partition: int) -> list[list[Row]]:
    batches: list[list[Row]] = []
    offset = draw(st.integers(0, 10))
    for _ in range(draw(st.integers(1, 5))):
        with_extra = draw(st.booleans())
        rows = []
        for _ in range(draw(st.integers(1, 20))):
            rows.append(
                Row(
                    partition,
                    offset,
                    draw(st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d"]))),
                    draw(st.one_of(st.none(), st.sampled_from(RIDS))),
                    draw(st.integers(-3, 30)),
                    draw(st.sampled_from(["x", "y"])) if with_extra else None,
                )
            )
            offset += 1
        batches.append(rows)
        offset += draw(st.integers(0, 2))
    return batches


def to_arrow(rows: list[Row]) -> pa.RecordBatch:
    columns: dict[str, pa.Array] = {
        "offset": pa.array([r.offset for r in rows], pa.int64()),
        "timestamp": pa.array([BASE_MS + r.offset for r in rows], TS),
        # A batch whose keys are all null has them as Arrow's null type, as the bridge does.
        "key": pa.nulls(len(rows))
        if all(r.key is None for r in rows)
        else pa.array([r.key for r in rows], pa.binary()),
        "rid": pa.array([r.rid for r in rows], pa.string()),
        "n": pa.array([r.n for r in rows], pa.int64()),
        "uid": pa.array([r.uid for r in rows], pa.string()),
    }
    if rows[0].extra is not None:
        columns["extra"] = pa.array([r.extra for r in rows], pa.string())
    return pa.RecordBatch.from_pydict(columns)


CONDITION_VALUES = {
    "key": st.sampled_from([b"a", b"b", b"c", b"d", b"zz"]),
    "rid": st.sampled_from([*RIDS, "absent"]),
    "n": st.integers(-5, 35),
    "extra": st.sampled_from(["x", "y", "z"]),
}


@st.composite
def wheres(draw: st.DrawFn) -> dict[str, list[object]]:
    columns = draw(st.sets(st.sampled_from(sorted(CONDITION_VALUES)), min_size=1, max_size=2))
    return {
        c: draw(st.lists(CONDITION_VALUES[c], min_size=1, max_size=3, unique=True))
        for c in sorted(columns)
    }


def write(store: Store, data: dict[int, list[list[Row]]], max_rows: int, fpp: float) -> None:
    writer = store.writer(WriterPolicy(writer_threads=1))
    # Filters on the key, a string and an integer column; `extra` has statistics only.
    index = IndexPolicy(bloom=("key", "rid", "n"), fpp=fpp)
    try:
        for partition, batches in data.items():
            writer.acquire(TOPIC, partition, roll=RollPolicy(max_rows=max_rows), index=index)
            for rows in batches:
                writer.append(TOPIC, partition, to_arrow(rows))
                writer.flush()
    finally:
        writer.close()


def uids(result: ReadResult) -> list[str]:
    return sorted(result.to_table().column("uid").to_pylist())


@given(
    data=st.sets(st.integers(0, 2), min_size=1, max_size=2).flatmap(
        lambda parts: st.fixed_dictionaries({p: partition_rows(p) for p in sorted(parts)})
    ),
    max_rows=st.integers(1, 12),
    # 0.5: many false positives, each of which must still cost no row.
    fpp=st.sampled_from([0.5, 0.01]),
    queries=st.lists(
        st.tuples(wheres(), st.one_of(st.none(), st.integers(0, 60))), min_size=1, max_size=4
    ),
)
@SETTINGS
def test_where_reads_match_the_model(
    data: dict[int, list[list[Row]]],
    max_rows: int,
    fpp: float,
    queries: list[tuple[dict[str, list[object]], int | None]],
) -> None:
    model = [row for batches in data.values() for rows in batches for row in rows]
    with (
        tempfile.TemporaryDirectory(prefix="plateau-where-") as tmp,
        Store.open(Path(tmp) / "data") as store,
    ):
        write(store, data, max_rows, fpp)
        segments = store.manifest.segments(TOPIC)
        for where, start in queries:
            matching = [
                r
                for r in model
                if (start is None or r.offset >= start)
                and all(r.get(c) in values for c, values in where.items())
            ]
            result = store.read(TOPIC, where=where, start_offset=start)
            assert uids(result) == sorted(r.uid for r in matching), (where, start)
            holding = {
                s.path
                for s in segments
                for r in matching
                if r.partition == s.partition and s.start_offset <= r.offset < s.end_offset
            }
            assert holding <= set(result.opened), (where, start)
            unpruned = ReadResult(store, result.request, prune=False)
            assert unpruned.pruned == 0
            assert uids(unpruned) == uids(result)


# --- numbers in columns of every width ---------------------------------------------------------

NUMERIC_TYPES = {
    "int8": pa.int8(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
}
EDGE_NUMBERS: list[int | float] = [
    0,
    -1,
    127,
    128,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**70),
    0.1,
    1.5,
    -2.0,
    1e300,
    float("inf"),
]


def stored_numbers(dtype: pa.DataType) -> st.SearchStrategy[int | float | None]:
    if pa.types.is_integer(dtype):
        info = np.iinfo(dtype.to_pandas_dtype())
        edges = [v for v in EDGE_NUMBERS if isinstance(v, int) and info.min <= v <= info.max]
        numbers = st.one_of(st.sampled_from(edges), st.integers(int(info.min), int(info.max)))
    else:
        numbers = st.one_of(
            st.sampled_from([0.1, 1.5, -2.0, 3.0, float("inf"), float("nan")]),
            st.floats(allow_nan=False, width=32 if dtype == pa.float32() else 64),
        )
    return st.one_of(st.none(), numbers)


def equal_to(row: int | float | None, dtype: pa.DataType, wanted: int | float) -> bool:
    """The model of `where`: an integer column equals a number exactly; a float column
    compares the number as its own type (0.1 in a float32 column is float32 0.1)."""
    if row is None:
        return False
    if pa.types.is_integer(dtype):
        return row == wanted
    try:
        as_double = float(wanted)
    except OverflowError:
        return False
    if dtype == pa.float32():
        with np.errstate(over="ignore"):
            single = float(np.float32(as_double))
        if math.isinf(single) and not math.isinf(as_double):
            return False
        return row == single
    return row == as_double


@st.composite
def numeric_segments(draw: st.DrawFn) -> tuple[pa.DataType, list[list[int | float | None]]]:
    dtype = NUMERIC_TYPES[draw(st.sampled_from(sorted(NUMERIC_TYPES)))]
    segments = draw(st.lists(st.lists(stored_numbers(dtype), min_size=1, max_size=6), max_size=5))
    return dtype, segments


@given(
    written=numeric_segments(),
    extra_wanted=st.lists(st.sampled_from(EDGE_NUMBERS), max_size=3),
    picks=st.lists(st.integers(0, 1000), max_size=3),
)
@example(written=(pa.float32(), [[0.1], [0.2]]), extra_wanted=[0.1], picks=[])
@example(written=(pa.float64(), [[-0.0, 1.0]]), extra_wanted=[0], picks=[])
@example(written=(pa.int64(), [[1, 2**63 - 1]]), extra_wanted=[1, 2**64, 2**63], picks=[])
@example(written=(pa.uint64(), [[2**63, 1]]), extra_wanted=[2**63], picks=[])
@SETTINGS
def test_numbers_are_found_in_columns_of_every_width_whatever_is_pruned(
    written: tuple[pa.DataType, list[list[int | float | None]]],
    extra_wanted: list[int | float],
    picks: list[int],
) -> None:
    """Checked against a plain pyarrow scan of every segment file: values beyond a column's
    range, fractions, and values a float32 column holds rounded find exactly the rows the
    model says, and pruning by statistics and filters changes nothing."""
    dtype, segments = written
    stored = [v for values in segments for v in values if v is not None and v == v]
    wanted = sorted(
        {*extra_wanted, *(stored[p % len(stored)] for p in picks if stored)}, key=repr
    ) or [0]
    with (
        tempfile.TemporaryDirectory(prefix="plateau-where-") as tmp,
        Store.open(Path(tmp) / "data") as store,
    ):
        offset = 0
        for values in segments:
            table = pa.table(
                {
                    "offset": pa.array(range(offset, offset + len(values)), pa.int64()),
                    "timestamp": pa.array([BASE_MS + offset] * len(values), TS),
                    "v": pa.array(values, dtype),
                }
            )
            offset += len(values)
            directory = store.data_dir / "topics" / TOPIC / "0"
            index = IndexPolicy(bloom=("v",), fpp=0.01)
            _path, stats = write_segment(directory, table, fsync=False, index=index)
            relative = relative_segment_path(TOPIC, 0, stats.start_offset)
            store.manifest.commit_segment(TOPIC, 0, stats, relative, table.schema)
        expected = []
        for segment in store.manifest.segments(TOPIC):
            scanned = ipc.open_file(store.segment_path(segment)).read_all().to_pydict()
            expected += [
                o
                for o, v in zip(scanned["offset"], scanned["v"], strict=True)
                if any(equal_to(v, dtype, w) for w in wanted)
            ]
        result = store.read(TOPIC, where={"v": wanted})
        assert result.to_table().column("offset").to_pylist() == expected, (dtype, wanted)
        unpruned = ReadResult(store, result.request, prune=False)
        assert unpruned.to_table().column("offset").to_pylist() == expected, (dtype, wanted)
