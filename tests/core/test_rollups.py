"""Roll-ups: sealed with the raw segments into `{topic}.rollup.{label}`, in the same
transaction; their aggregates equal the same aggregates over the raw rows."""

from __future__ import annotations

import random
import struct
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from plateau_core import InvalidInputError, RollPolicy, Store, WriterPolicy
from plateau_core.rollup import (
    RollupMetric,
    RollupPolicy,
    granularity_ms,
    reaggregate,
    rollup_metrics,
    rollup_table,
)
from plateau_core.sketches import estimate, merge_sketches, sketch
from tests.support import append_patiently

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000
POLICY = RollupPolicy(
    "1m",
    60_000,
    ("service", "level"),
    rollup_metrics(["count", "sum:latency", "min:latency", "max:latency", "distinct:user"]),
)
SERVICES = ["api", "web", "db"]
LEVELS = ["INFO", "ERROR"]


def _rows(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "offset": i,
            "timestamp": BASE_MS + i * 700,  # about 86 rows a minute
            "service": rng.choice(SERVICES),
            "level": rng.choice(LEVELS),
            "latency": rng.randint(1, 500),
            "user": rng.randint(0, 40),
        }
        for i in range(count)
    ]


def _write(store: Store, rows: list[dict[str, Any]], roll_rows: int) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire(
            "logs", 0, roll=RollPolicy(max_rows=roll_rows, max_age_s=3600), rollups=(POLICY,)
        )
        for at in range(0, len(rows), 25):
            part = rows[at : at + 25]
            batch = pa.RecordBatch.from_pydict(
                {
                    "offset": pa.array([r["offset"] for r in part], pa.int64()),
                    "timestamp": pa.array([r["timestamp"] for r in part], TS),
                    "service": [r["service"] for r in part],
                    "level": [r["level"] for r in part],
                    "latency": pa.array([r["latency"] for r in part], pa.int64()),
                    "user": pa.array([r["user"] for r in part], pa.int64()),
                }
            )
            append_patiently(writer, "logs", 0, batch)
        writer.flush()
    finally:
        writer.close()


def _expected(rows: list[dict[str, Any]]) -> dict[tuple[int, str, str], tuple[Any, ...]]:
    groups: dict[tuple[int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["timestamp"] // 60_000 * 60_000, r["service"], r["level"])].append(r)
    return {
        key: (
            len(g),
            sum(r["latency"] for r in g),
            min(r["latency"] for r in g),
            max(r["latency"] for r in g),
            float(len({r["user"] for r in g})),
        )
        for key, g in groups.items()
    }


def _rolled(store: Store) -> dict[tuple[int, str, str], tuple[Any, ...]]:
    table = reaggregate(store.read("logs.rollup.1m").to_table(), POLICY)
    times = table.column("timestamp").cast(pa.int64()).to_pylist()
    found = {}
    for i, at in enumerate(times):
        key = (at, table.column("service")[i].as_py(), table.column("level")[i].as_py())
        found[key] = tuple(
            table.column(name)[i].as_py()
            for name in ("count", "sum_latency", "min_latency", "max_latency", "distinct_user")
        )
    return found


@pytest.mark.parametrize("roll_rows", [50, 300, 1000])
def test_rollup_aggregates_equal_those_over_the_raw_rows(store: Store, roll_rows: int) -> None:
    rows = _rows(roll_rows, 1000)
    _write(store, rows, roll_rows)
    assert _rolled(store) == _expected(rows)
    raw = store.manifest.segments("logs")
    derived = store.manifest.segments("logs.rollup.1m")
    # One roll-up segment per raw segment, at its first offset.
    assert [s.start_offset for s in derived] == [s.start_offset for s in raw]
    stored = sum(s.record_count for s in derived)
    assert stored < len(rows) / 4 if roll_rows >= 300 else stored < len(rows)
    errors = store.read("logs.rollup.1m", where={"level": "ERROR"}).to_table()
    assert sum(errors.column("count").to_pylist()) == sum(r["level"] == "ERROR" for r in rows)


def test_acquiring_the_raw_partition_removes_a_roll_up_file_no_row_names(store: Store) -> None:
    rows = _rows(3, 200)
    _write(store, rows, 100)
    derived = store.data_dir / "topics" / "logs.rollup.1m" / "0"
    named = sorted(p.name for p in derived.glob("*.arrow"))
    # What a crash between a seal's files and its transaction leaves in the roll-up folder.
    orphan = derived / f"{200:020d}.arrow"
    orphan.write_bytes(next(derived.glob("*.arrow")).read_bytes())
    _write(store, [], 100)  # acquire (and release) the raw partition again
    assert sorted(p.name for p in derived.glob("*.arrow")) == named
    assert _rolled(store) == _expected(rows)


def test_a_failed_commit_records_neither_and_the_retry_both_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = store.manifest.commit_seal
    calls = {"n": 0}

    def flaky(commits: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("the disk went away")
        if calls["n"] == 2:
            original(commits)  # lands, then the answer is lost: an unknown outcome
            raise OSError("connection reset")
        return original(commits)

    monkeypatch.setattr(store.manifest, "commit_seal", flaky)
    rows = _rows(7, 400)
    _write(store, rows, 100)
    assert calls["n"] >= 2  # the failure, the lost answer (later seals may follow)
    raw = store.manifest.segments("logs")
    derived = store.manifest.segments("logs.rollup.1m")
    assert [s.start_offset for s in derived] == [s.start_offset for s in raw]
    assert _rolled(store) == _expected(rows)
    assert store.manifest.watermark("logs.rollup.1m", 0) == raw[-1].start_offset + 1


def test_sketches_merge_and_estimate() -> None:
    small = sketch("int", range(100))
    assert estimate(small) == 100.0
    assert estimate(merge_sketches([small, sketch("int", range(50, 120)), None])) == 120.0
    big = merge_sketches(
        [sketch("bytes", [f"u{i}" for i in range(j, j + 5000)]) for j in (0, 5000)]
    )
    assert abs(estimate(big) - 10_000) / 10_000 < 0.3
    assert sketch(None, [1.5]) == b""


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RollupPolicy("1x", 1, (), rollup_metrics(["count"])), "granularity"),
        (lambda: RollupPolicy("1m", 60_000, (), ()), "at least one metric"),
        (lambda: rollup_metrics(["median:x"]), "one of count"),
        (lambda: RollupMetric("sum"), "the others one"),
        (lambda: RollupPolicy("1m", 60_000, ("count",), rollup_metrics(["count"])), "distinct"),
        (lambda: granularity_ms("0m"), "granularity"),
    ],
)
def test_bad_rollups_are_refused(build: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        build()


@given(seed=st.integers(0, 10**6), count=st.integers(1, 300), roll_rows=st.integers(1, 120))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_rollups_match_the_raw_rows_whatever_the_seals(
    seed: int, count: int, roll_rows: int
) -> None:
    rows = _rows(seed, count)
    with (
        tempfile.TemporaryDirectory(prefix="plateau-rollup-") as tmp,
        Store.open(Path(tmp)) as store,
    ):
        _write(store, rows, roll_rows)
        assert _rolled(store) == _expected(rows)


def test_a_segment_without_a_metric_or_dimension_column_seals_and_adds_nothing(
    store: Store,
) -> None:
    """JSON topics infer each segment's columns: a segment where no record had the metric's
    or a dimension's field, or had it only as null (a null-typed column), still seals, and
    merges with the segments that have them."""
    policy = RollupPolicy(
        "1m",
        60_000,
        ("service", "zone"),
        rollup_metrics(["count", "sum:latency", "min:latency", "max:latency", "distinct:user"]),
    )
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire(
            "logs", 0, roll=RollPolicy(max_rows=10**6, max_age_s=3600), rollups=(policy,)
        )
        bare = pa.RecordBatch.from_pydict(
            {
                "offset": pa.array([0, 1], pa.int64()),
                "timestamp": pa.array([BASE_MS, BASE_MS + 1], TS),
                "service": ["api", "api"],
            }
        )
        full = pa.RecordBatch.from_pydict(
            {
                "offset": pa.array([2, 3], pa.int64()),
                "timestamp": pa.array([BASE_MS + 2, BASE_MS + 3], TS),
                "service": ["api", "api"],
                "zone": pa.array([7, 7], pa.int64()),
                "latency": pa.array([5, 9], pa.int64()),
                "user": pa.array([1, 2], pa.int64()),
            }
        )
        nulls = pa.RecordBatch.from_pydict(
            {
                "offset": pa.array([4], pa.int64()),
                "timestamp": pa.array([BASE_MS + 4], TS),
                "service": ["api"],
                "latency": pa.nulls(1),
                "user": pa.nulls(1),
            }
        )
        for batch in (bare, full, nulls):
            append_patiently(writer, "logs", 0, batch)
            writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)
    assert [s.start_offset for s in store.manifest.segments("logs.rollup.1m")] == [0, 2, 4]
    table = reaggregate(store.read("logs.rollup.1m").to_table(), policy)
    assert table.select(
        ["service", "zone", "count", "sum_latency", "min_latency", "max_latency", "distinct_user"]
    ).to_pylist() == [
        {
            "service": "api",
            "zone": 7,
            "count": 2,
            "sum_latency": 14,
            "min_latency": 5,
            "max_latency": 9,
            "distinct_user": 2.0,
        },
        {
            "service": "api",
            "zone": None,
            "count": 3,
            "sum_latency": None,
            "min_latency": None,
            "max_latency": None,
            "distinct_user": 0.0,
        },
    ]


def test_a_metric_over_a_column_of_a_type_it_cannot_aggregate_gives_nulls(store: Store) -> None:
    """The sum of text or the minimum of a list has no aggregate: such a metric gets nulls
    (and a warning) while the partition's raw records and the other metrics seal. It failed
    every seal of the partition before, so its raw records never landed."""
    policy = RollupPolicy(
        "1m",
        60_000,
        ("service",),
        rollup_metrics(["count", "sum:latency", "min:tags", "max:latency", "distinct:tags"]),
    )
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire(
            "logs", 0, roll=RollPolicy(max_rows=10**6, max_age_s=3600), rollups=(policy,)
        )
        batch = pa.RecordBatch.from_pydict(
            {
                "offset": pa.array([0, 1, 2], pa.int64()),
                "timestamp": pa.array([BASE_MS, BASE_MS + 1, BASE_MS + 2], TS),
                "service": ["api", "api", "db"],
                "latency": ["slow", "fast", "slow"],
                "tags": pa.array([["a"], ["b"], []], pa.list_(pa.string())),
            }
        )
        append_patiently(writer, "logs", 0, batch)
        writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)
    assert store.read("logs").to_table().num_rows == 3
    table = reaggregate(store.read("logs.rollup.1m").to_table(), policy)
    assert table.select(
        ["service", "count", "sum_latency", "min_tags", "max_latency", "distinct_tags"]
    ).to_pylist() == [
        {
            "service": "api",
            "count": 2,
            "sum_latency": None,
            "min_tags": None,
            "max_latency": "slow",
            "distinct_tags": 0.0,
        },
        {
            "service": "db",
            "count": 1,
            "sum_latency": None,
            "min_tags": None,
            "max_latency": "slow",
            "distinct_tags": 0.0,
        },
    ]


def test_only_a_metric_whose_column_type_has_no_aggregate_is_warned_about() -> None:
    """A column a segment lacks or holds only as nulls is what a JSON topic's sparse field
    gives, seal after seal, and needs no fixing; a type the aggregate cannot take does."""
    policy = RollupPolicy(
        "1m",
        60_000,
        ("service",),
        rollup_metrics(["count", "sum:latency", "max:absent", "distinct:user", "sum:text"]),
    )
    table = pa.table(
        {
            "offset": pa.array([0, 1], pa.int64()),
            "timestamp": pa.array([BASE_MS, BASE_MS + 1], TS),
            "service": ["api", "api"],
            "latency": pa.array([3, 4], pa.int64()),
            "user": pa.nulls(2),
            "text": ["a", "b"],
        }
    )
    with capture_logs() as logs:
        rolled = rollup_table(table, policy, topic="logs", partition=0)
    assert rolled.column("sum_latency").to_pylist() == [7]
    warned = [e for e in logs if e["event"] == "rollup_metrics_skipped"]
    assert [e["metrics"] for e in warned] == [{"sum_text": "string"}]


def test_a_dimension_of_a_nested_type_groups_by_its_json_text(store: Store) -> None:
    """Arrow groups by no list, struct or map: a JSON field holding an array or an object
    as a dimension failed every seal of the partition, its raw records with it. It groups by
    the value's JSON text, as a column whose types clash reads."""
    policy = RollupPolicy("1m", 60_000, ("tags", "origin"), rollup_metrics(["count"]))
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire(
            "logs", 0, roll=RollPolicy(max_rows=10**6, max_age_s=3600), rollups=(policy,)
        )
        batch = pa.RecordBatch.from_pydict(
            {
                "offset": pa.array([0, 1, 2, 3], pa.int64()),
                "timestamp": pa.array([BASE_MS, BASE_MS + 1, BASE_MS + 2, BASE_MS + 3], TS),
                "tags": pa.array([["a"], ["b", "c"], ["a"], None], pa.list_(pa.string())),
                "origin": pa.array(
                    [{"zone": 1}, {"zone": 2}, {"zone": 1}, {"zone": 1}],
                    pa.struct([pa.field("zone", pa.int64())]),
                ),
            }
        )
        append_patiently(writer, "logs", 0, batch)
        writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)
    assert store.read("logs").to_table().num_rows == 4
    table = reaggregate(store.read("logs.rollup.1m").to_table(), policy)
    assert table.select(["tags", "origin", "count"]).to_pylist() == [
        {"tags": '["a"]', "origin": '{"zone":1}', "count": 2},
        {"tags": '["b","c"]', "origin": '{"zone":2}', "count": 1},
        {"tags": None, "origin": '{"zone":1}', "count": 1},
    ]


def test_a_distinct_count_over_a_column_it_cannot_hash_is_warned_about() -> None:
    """Distinct counts hash integers, floats, strings and binary: over a boolean, date or
    timestamp column every sketch was empty, a distinct count of 0, with nothing said."""
    policy = RollupPolicy(
        "1m", 60_000, (), rollup_metrics(["count", "distinct:ok", "distinct:user"])
    )
    table = pa.table(
        {
            "offset": pa.array([0, 1], pa.int64()),
            "timestamp": pa.array([BASE_MS, BASE_MS + 1], TS),
            "ok": pa.array([True, False]),
            "user": pa.array([1, 2], pa.int64()),
        }
    )
    with capture_logs() as logs:
        rolled = rollup_table(table, policy, topic="logs", partition=0)
    assert estimate(rolled.column("distinct_user")[0].as_py()) == 2.0
    assert rolled.column("distinct_ok").to_pylist() == [b""]
    warned = [e for e in logs if e["event"] == "rollup_metrics_skipped"]
    assert [e["metrics"] for e in warned] == [{"distinct_ok": "bool"}]


def test_a_distinct_count_of_floats_counts_a_whole_double_as_its_integer() -> None:
    """A json field that widened from int64 to double: 20 and 20.0 are one value, and a
    fraction never counts as the integer whose bytes its own share."""
    ints = sketch("int", [10, 20, 0])
    floats = sketch("float", [20.0, 0.5, -0.0, float("nan"), float("nan"), 1e300, None])
    assert estimate(merge_sketches([ints, floats])) == 6.0  # 10, 20, 0, 0.5, nan, 1e300
    assert estimate(sketch("float", [0.1, 0.2, 0.1])) == 2.0
    bits = int.from_bytes(struct.pack("<d", 0.5), "little", signed=True)
    assert estimate(merge_sketches([sketch("int", [bits]), sketch("float", [0.5])])) == 2.0


def test_two_rollups_into_one_derived_topic_are_refused_at_acquire(store: Store) -> None:
    """Both would seal into logs.rollup.1m at the same offsets: every seal of the partition
    conflicted with itself, and its raw records never landed."""
    by_host = RollupPolicy("1m", 60_000, ("host",), rollup_metrics(["count"]))
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        with pytest.raises(InvalidInputError, match=r"logs\.rollup\.1m"):
            writer.acquire("logs", 0, rollups=(POLICY, by_host))
        assert writer.owned() == []
        writer.acquire("logs", 0, rollups=(POLICY,))  # the lock was let go
    finally:
        writer.close(timeout_s=5)


def test_reaggregating_roll_ups_sealed_before_a_metric_or_dimension_was_added(
    store: Store,
) -> None:
    """A roll-up's config gained a metric and a dimension: until a segment is sealed with
    them, the topic's rows have neither column, and re-aggregating them with the new policy
    raised Arrow's "No match for FieldRef.Name(sum_latency)". They read as nulls, as a
    segment without the column does."""
    before = RollupPolicy("1m", 60_000, ("service",), rollup_metrics(["count"]))
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        writer.acquire("logs", 0, rollups=(before,))
        batch = pa.RecordBatch.from_pydict(
            {
                "offset": pa.array([0, 1], pa.int64()),
                "timestamp": pa.array([BASE_MS, BASE_MS + 1], TS),
                "service": ["api", "api"],
                "latency": pa.array([3, 4], pa.int64()),
            }
        )
        append_patiently(writer, "logs", 0, batch)
        writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)
    after = RollupPolicy(
        "1m",
        60_000,
        ("service", "zone"),
        rollup_metrics(["count", "sum:latency", "distinct:user"]),
    )
    table = reaggregate(store.read("logs.rollup.1m").to_table(), after)
    assert table.select(
        ["service", "zone", "count", "sum_latency", "distinct_user"]
    ).to_pylist() == [
        {"service": "api", "zone": None, "count": 2, "sum_latency": None, "distinct_user": 0.0}
    ]


def test_columns_named_like_the_grouping_s_own_are_rolled_up_as_any_other() -> None:
    """The grouping table names its columns by their place: a topic's own `__bucket`
    dimension took the bucket's place, and a metric over `__m_x` the metric of `x`."""
    policy = RollupPolicy(
        "1m",
        60_000,
        ("__bucket", "__d0"),
        rollup_metrics(["count", "sum:__m0", "max:__m_x", "min:x"]),
    )
    table = pa.table(
        {
            "offset": pa.array([0, 1, 2], pa.int64()),
            "timestamp": pa.array([BASE_MS, BASE_MS + 1, BASE_MS + 60_000], TS),
            "__bucket": ["a", "b", "a"],
            "__d0": ["p", "p", "p"],
            "__m0": pa.array([10, 20, 30], pa.int64()),
            "__m_x": pa.array([5, 6, 7], pa.int64()),
            "x": pa.array([1, 2, 3], pa.int64()),
        }
    )
    rolled = rollup_table(table, policy).to_pylist()
    assert [
        (r["timestamp"], r["__bucket"], r["__d0"], r["count"], r["sum___m0"]) for r in rolled
    ] == [
        (rolled[0]["timestamp"], "a", "p", 1, 10),
        (rolled[0]["timestamp"], "b", "p", 1, 20),
        (rolled[2]["timestamp"], "a", "p", 1, 30),
    ]
    assert [(r["max___m_x"], r["min_x"]) for r in rolled] == [(5, 1), (6, 2), (7, 3)]
    assert rolled[0]["timestamp"] != rolled[2]["timestamp"]


def test_metrics_over_a_json_field_that_widened_to_a_double(store: Store) -> None:
    """An inferred json field seals as int64 until it meets a fraction, as a double after:
    the roll-up segments hold `sum_`, `min_` and `max_` in each type, and they read and
    re-aggregate as doubles. A distinct count hashes a whole double as its integer: 20 and
    20.0 count once."""
    policy = RollupPolicy(
        "1m",
        60_000,
        ("service",),
        rollup_metrics(["count", "sum:latency", "min:latency", "max:latency", "distinct:latency"]),
    )
    writer = store.writer(WriterPolicy(fsync=False))
    parts = [pa.array([10, 20], pa.int64()), pa.array([0.5, 20.0], pa.float64())]
    try:
        writer.acquire("logs", 0, roll=RollPolicy(max_age_s=3600), rollups=(policy,))
        with capture_logs() as logs:
            for at, latency in enumerate(parts):
                batch = pa.RecordBatch.from_pydict(
                    {
                        "offset": pa.array([2 * at, 2 * at + 1], pa.int64()),
                        "timestamp": pa.array([BASE_MS + at, BASE_MS + at + 10], TS),
                        "service": ["api", "api"],
                        "latency": latency,
                    }
                )
                append_patiently(writer, "logs", 0, batch)
            writer.flush(timeout_s=5)
    finally:
        writer.close(timeout_s=5)
    assert len(store.manifest.segments("logs")) == 2  # a segment per schema
    stored = store.read("logs.rollup.1m").to_table()
    assert stored.schema.field("sum_latency").type == pa.float64()
    assert stored.column("sum_latency").to_pylist() == [30.0, 20.5]
    table = reaggregate(stored, policy)
    assert table.select(
        ["service", "count", "sum_latency", "min_latency", "max_latency", "distinct_latency"]
    ).to_pylist() == [
        {
            "service": "api",
            "count": 4,
            "sum_latency": 50.5,
            "min_latency": 0.5,
            "max_latency": 20.0,
            "distinct_latency": 3.0,  # 10, 20 and 0.5
        }
    ]
    assert [e for e in logs if e["event"] == "rollup_metrics_skipped"] == []
