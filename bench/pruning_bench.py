"""Query pruning on a realistic log topic: needle queries by request id with and without bloom
filters (and the promoted statistics), and the newest rows with and without early
termination, in the core reader and optionally (--spark) through the Spark connector.

Builds (or reuses, with --data-dir) a store of a log topic: services, levels, statuses,
latencies, routes, a user key and a unique request id per row, over `--partitions`
partitions, cut into segments of `--segment-rows` rows spanning one second each (what a 1 s
`roll.max_age` leaves at this rate). Each segment keeps bloom filters of `key` and
`request_id` at `--fpp`. Then, in the same run, after one untimed pass over every file:

- needle: store.read(topic, where={"request_id": id}) for ids drawn from the whole topic;
- needle, no pruning: the same request with pruning off (every segment of the topic opened,
  which is what a store without filters does: random ids put every segment's min/max around
  the whole id range, so statistics alone rule nothing out);
- newest: store.read(topic, order_by="timestamp", order="desc", limit=100);
- newest, full sort: every row read and sorted by timestamp, then the first 100 taken;
- with --consolidate BYTES, last (it rewrites the store, which the next run then builds
  again): one consolidation pass to segments of up to BYTES, retired files removed, then the
  segment count before and after and the needle queries again;
- with --rollups, the topic is built with a per-minute roll-up by service and level (count,
  sum/min/max of latency_ms, distinct users), sealed in the same transactions; then the
  error dashboard (errors per minute per service over the whole topic) over the raw rows
  against over the roll-up topic, as sealed and after consolidating it;
- with --spark, the same pairs through the connector: `request_id = id` with pushdown (bloom
  pruning) against pushdown=false, and `ORDER BY timestamp DESC LIMIT 100` pushed as a TopN
  against pushdown=false (Spark sorts every row).

Each needle is timed both ways, interleaved; medians count. Results go to
bench/results/pruning-<ts>.json.

    .venv/bin/python bench/pruning_bench.py
    .venv/bin/python bench/pruning_bench.py --rows 2000000 --needles 5     # quick look
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from benchdata import BASE_MS, machine_info, median, quiet_logs, write_results

from plateau_core import Retention, Store, StoreLimits
from plateau_core.consolidate import Consolidator
from plateau_core.manifest.records import PartitionCommit, SegmentFile
from plateau_core.names import relative_segment_path
from plateau_core.policies import ConsolidatePolicy, IndexPolicy
from plateau_core.reader import ReadResult
from plateau_core.rollup import RollupPolicy, rollup_metrics, rollup_table
from plateau_core.segment_file import write_segment

TOPIC = "logs"
SETTINGS_FILE = "pruning-bench.json"
SERVICES = pa.array(
    ["checkout", "payments", "search", "auth", "inventory", "shipping", "catalog", "users"]
)
LEVELS = pa.array(["INFO"] * 12 + ["WARN", "WARN", "ERROR", "DEBUG"])
ROUTES = pa.array(["GET /api/v1/orders", "GET /api/v2/search", "POST /login", "PUT /api/cart"])
STATUSES = np.array([200] * 20 + [201, 204, 302, 400, 404, 500], np.int32)
HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
MIX = np.uint64(0x9E3779B97F4A7C15)


def request_ids(partition: int, offsets: np.ndarray) -> pa.Array:
    """16 hex digits per row, unique per (partition, offset), in no order."""
    mixed = (offsets.astype(np.uint64) + np.uint64(partition << 48)) * MIX
    shifts = np.arange(60, -4, -4, dtype=np.uint64)
    digits = HEX[((mixed[:, None] >> shifts[None, :]) & np.uint64(0xF)).astype(np.intp)]
    n = len(offsets)
    value_offsets = pa.py_buffer(np.arange(0, 16 * n + 1, 16, dtype=np.int32).tobytes())
    return pa.Array.from_buffers(
        pa.string(), n, [None, value_offsets, pa.py_buffer(digits.tobytes())]
    )


def request_id(partition: int, offset: int) -> str:
    one = request_ids(partition, np.array([offset], np.int64))
    return str(one[0].as_py())


def segment_table(
    rng: np.random.Generator, partition: int, start: int, rows: int, second: int
) -> pa.Table:
    offsets = np.arange(start, start + rows, dtype=np.int64)
    times = BASE_MS + second * 1000 + np.sort(rng.integers(0, 1000, rows))
    users = rng.integers(0, 50_000, rows)
    return pa.table(
        {
            "offset": pa.array(offsets),
            "timestamp": pa.array(times, pa.timestamp("ms", tz="UTC")),
            "key": pa.array([b"user-%d" % u for u in users.tolist()], pa.binary()),
            "service": SERVICES.take(pa.array(rng.integers(0, len(SERVICES), rows))),
            "level": LEVELS.take(pa.array(rng.integers(0, len(LEVELS), rows))),
            "status": pa.array(STATUSES[rng.integers(0, len(STATUSES), rows)]),
            "latency_ms": pa.array(rng.gamma(2.0, 20.0, rows)),
            "route": ROUTES.take(pa.array(rng.integers(0, len(ROUTES), rows))),
            "request_id": request_ids(partition, offsets),
        }
    )


def build(store: Store, settings: dict[str, Any]) -> float:
    """Write the topic straight through the seal path's own steps (file, then manifest), one
    transaction per 50 segments; returns the seconds taken."""
    began = time.perf_counter()
    rng = np.random.default_rng(18)
    index = IndexPolicy(bloom=("key", "request_id"), fpp=settings["fpp"])
    per_partition = settings["rows"] // settings["partitions"]
    segment_rows = settings["segment_rows"]
    for partition in range(settings["partitions"]):
        directory = store.data_dir / "topics" / TOPIC / str(partition)
        pending: list[SegmentFile] = []
        rolled: list[SegmentFile] = []
        for number, start in enumerate(range(0, per_partition, segment_rows)):
            rows = min(segment_rows, per_partition - start)
            table = segment_table(rng, partition, start, rows, number)
            _, stats = write_segment(directory, table, "lz4", fsync=False, index=index)
            pending.append(
                SegmentFile(stats, relative_segment_path(TOPIC, partition, start), table.schema)
            )
            if settings.get("rollups"):
                rolled.append(_roll_up(store, table, partition))
            if len(pending) == 50:
                _commit(store, partition, pending, rolled)
                pending, rolled = [], []
        if pending:
            _commit(store, partition, pending, rolled)
    return time.perf_counter() - began


ROLLUP = RollupPolicy(
    "1m",
    60_000,
    ("service", "level"),
    rollup_metrics(["count", "sum:latency_ms", "min:latency_ms", "max:latency_ms", "distinct:key"]),
)
DERIVED = ROLLUP.derived_topic(TOPIC)


def _roll_up(store: Store, table: pa.Table, partition: int) -> SegmentFile:
    """The seal's roll-up step (plateau_core.sealing): one roll-up segment per raw one."""
    rolled = rollup_table(table, ROLLUP)
    directory = store.data_dir / "topics" / DERIVED / str(partition)
    _, stats = write_segment(directory, rolled, "lz4", fsync=False)
    relative = relative_segment_path(DERIVED, partition, stats.start_offset)
    return SegmentFile(stats, relative, rolled.schema)


def _commit(
    store: Store, partition: int, raw: list[SegmentFile], rolled: list[SegmentFile]
) -> None:
    commits = [PartitionCommit(TOPIC, partition, tuple(raw))]
    if rolled:  # in the raw segments' transaction, as the seal records them
        commits.append(PartitionCommit(DERIVED, partition, tuple(rolled)))
    store.manifest.commit_seal(commits)


def dashboard(store: Store, repeat: int) -> dict[str, Any]:
    """Errors per minute per service over the whole topic: raw rows against the roll-up."""

    def raw() -> pa.Table:
        rows = store.read(TOPIC, columns=["timestamp", "service"], where={"level": "ERROR"})
        table = rows.to_table()
        stamps = table.column("timestamp").cast(pa.int64()).to_numpy()
        minutes = pa.array(stamps // 60_000 * 60_000)
        grouped = pa.table({"minute": minutes, "service": table.column("service")})
        counted = grouped.group_by(["minute", "service"]).aggregate([([], "count_all")])
        return counted.rename_columns(["minute", "service", "errors"]).sort_by(
            [("minute", "ascending"), ("service", "ascending")]
        )

    def rolled() -> pa.Table:
        result = store.read(
            DERIVED, columns=["timestamp", "service", "count"], where={"level": "ERROR"}
        )
        table = result.to_table()
        grouped = pa.table(
            {
                "minute": table.column("timestamp").cast(pa.int64()),
                "service": table.column("service"),
                "count": table.column("count"),
            }
        )
        summed = grouped.group_by(["minute", "service"]).aggregate([("count", "sum")])
        return summed.rename_columns(["minute", "service", "errors"]).sort_by(
            [("minute", "ascending"), ("service", "ascending")]
        )

    def timing(query: Callable[[], pa.Table]) -> tuple[list[float], pa.Table]:
        times, answer = [], pa.table({})
        for _ in range(repeat):
            began = time.perf_counter()
            answer = query()
            times.append(time.perf_counter() - began)
        return times, answer

    raw_s, raw_answer = timing(raw)
    sealed_s, sealed_answer = timing(rolled)
    assert sealed_answer.equals(raw_answer)
    segments_sealed = len(store.manifest.segments(DERIVED))
    policy = ConsolidatePolicy(min_age_s=0)
    Consolidator(store, {DERIVED: policy}, fsync=False).run()
    Retention(store, limits=StoreLimits(deletion_grace_s=0)).run()
    merged_s, merged_answer = timing(rolled)
    assert merged_answer.equals(raw_answer)
    raw_rows = sum(s.record_count for s in store.manifest.segments(TOPIC))
    rollup_rows = sum(s.record_count for s in store.manifest.segments(DERIVED))
    return {
        "raw_s": raw_s,
        "rollup_sealed_s": sealed_s,
        "rollup_consolidated_s": merged_s,
        "raw_rows": raw_rows,
        "rollup_rows": rollup_rows,
        "rows_cut": raw_rows / rollup_rows,
        "rollup_segments_sealed": segments_sealed,
        "rollup_segments_consolidated": len(store.manifest.segments(DERIVED)),
        "speedup_sealed": median(raw_s) / median(sealed_s),
        "speedup_consolidated": median(raw_s) / median(merged_s),
    }


def timed(result: ReadResult) -> tuple[float, int]:
    began = time.perf_counter()
    rows = sum(batch.num_rows for batch in result)
    return time.perf_counter() - began, rows


def needles(store: Store, settings: dict[str, Any], count: int) -> dict[str, Any]:
    rng = random.Random(18)
    per_partition = settings["rows"] // settings["partitions"]
    segments = len(store.manifest.segments(TOPIC))
    pruned_s: list[float] = []
    full_s: list[float] = []
    opened: list[int] = []
    for _ in range(count):
        partition = rng.randrange(settings["partitions"])
        wanted = request_id(partition, rng.randrange(per_partition))
        began = time.perf_counter()
        result = store.read(TOPIC, where={"request_id": wanted})
        rows = sum(batch.num_rows for batch in result)
        pruned_s.append(time.perf_counter() - began)
        assert rows == 1, (wanted, rows)
        opened.append(len(result.opened))
        began = time.perf_counter()
        unpruned = ReadResult(store, result.request, prune=False)
        rows = sum(batch.num_rows for batch in unpruned)
        full_s.append(time.perf_counter() - began)
        assert rows == 1 and len(unpruned.opened) == segments
    return {
        "segments": segments,
        "needles": count,
        "opened": opened,
        "opened_share_max": max(opened) / segments,
        "opened_share_mean": sum(opened) / len(opened) / segments,
        "pruned_s": pruned_s,
        "unpruned_s": full_s,
        "pruned_median_s": median(pruned_s),
        "unpruned_median_s": median(full_s),
        "speedup": median(full_s) / median(pruned_s),
    }


def newest(store: Store, repeat: int, k: int = 100) -> dict[str, Any]:
    early_s: list[float] = []
    full_s: list[float] = []
    opened = 0
    for _ in range(repeat):
        began = time.perf_counter()
        result = store.read(TOPIC, order_by="timestamp", order="desc", limit=k)
        top = result.to_table()
        early_s.append(time.perf_counter() - began)
        opened = len(result.opened)
        began = time.perf_counter()
        everything = store.read(TOPIC).to_table()
        ordered = everything.sort_by([("timestamp", "descending"), ("offset", "descending")])
        full = ordered.slice(0, k)
        full_s.append(time.perf_counter() - began)
        assert top.column("timestamp").equals(full.column("timestamp"))
    return {
        "k": k,
        "opened": opened,
        "early_s": early_s,
        "full_sort_s": full_s,
        "early_median_s": median(early_s),
        "full_sort_median_s": median(full_s),
        "speedup": median(full_s) / median(early_s),
    }


def spark_pairs(store: Store, settings: dict[str, Any], repeat: int) -> dict[str, Any]:
    from plateau_spark import session  # noqa: PLC0415

    spark = session("local[2]")

    def frame(pushdown: bool) -> Any:
        reader = spark.read.format("plateau").option("path", str(store.data_dir))
        reader = reader.option("topic", TOPIC).option("pushdown", str(pushdown).lower())
        return reader.load()

    rng = random.Random(7)
    per_partition = settings["rows"] // settings["partitions"]
    pairs: dict[str, dict[str, list[float]]] = {"needle": {}, "newest": {}}
    for pushdown in (True, False):  # untimed: the JVM's first queries compile and load
        frame(pushdown).filter(f"request_id = '{request_id(0, 0)}'").collect()
        frame(pushdown).orderBy(fn_desc("timestamp")).limit(100).collect()
    for _ in range(repeat):
        wanted = request_id(rng.randrange(settings["partitions"]), rng.randrange(per_partition))
        for pushdown in (True, False):
            began = time.perf_counter()
            rows = frame(pushdown).filter(f"request_id = '{wanted}'").collect()
            pairs["needle"].setdefault(str(pushdown), []).append(time.perf_counter() - began)
            assert len(rows) == 1
            began = time.perf_counter()
            top = frame(pushdown).orderBy(fn_desc("timestamp")).limit(100).collect()
            pairs["newest"].setdefault(str(pushdown), []).append(time.perf_counter() - began)
            assert len(top) == 100
    return {
        name: {
            "pushdown_s": times["True"],
            "no_pushdown_s": times["False"],
            "speedup": median(times["False"]) / median(times["True"]),
        }
        for name, times in pairs.items()
    }


def consolidate(store: Store, settings: dict[str, Any], target_bytes: int) -> dict[str, Any]:
    before = store.manifest.segments(TOPIC)
    records = sum(s.record_count for s in before)
    index = IndexPolicy(bloom=("key", "request_id"), fpp=settings["fpp"])
    policy = ConsolidatePolicy(target_bytes=target_bytes, min_age_s=0)
    consolidator = Consolidator(store, {TOPIC: policy}, indexes={TOPIC: index}, fsync=False)
    began = time.perf_counter()
    report = consolidator.run()
    seconds = time.perf_counter() - began
    Retention(store, limits=StoreLimits(deletion_grace_s=0)).run()
    after = store.manifest.segments(TOPIC)
    assert sum(s.record_count for s in after) == records
    return {
        "target_bytes": target_bytes,
        "segments_before": len(before),
        "segments_after": len(after),
        "reduction": len(before) / len(after),
        "merges": len(report.merged),
        "seconds": seconds,
        "mb_per_s": sum(s.size_bytes for s in before) / 1e6 / seconds,
    }


def fn_desc(column: str) -> Any:
    from pyspark.sql import functions as fn  # noqa: PLC0415

    return fn.col(column).desc()


def warm(store: Store) -> None:
    for segment in store.manifest.segments(TOPIC):
        store.segment_path(segment).read_bytes()


def open_store(
    args: argparse.Namespace, settings: dict[str, Any]
) -> tuple[Store, float | None, Path | None]:
    if args.data_dir is None:
        temp = Path(tempfile.mkdtemp(prefix="plateau-pruning-"))
        store = Store.open(temp / "data")
        return store, build(store, settings), temp
    root = Path(args.data_dir)
    marker = root / SETTINGS_FILE
    if marker.exists() and json.loads(marker.read_text()) == settings:
        return Store.open(root / "data"), None, None
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    store = Store.open(root / "data")
    seconds = build(store, settings)
    marker.write_text(json.dumps(settings))
    return store, seconds, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-rows", type=int, default=2_000)
    parser.add_argument("--fpp", type=float, default=0.01)
    parser.add_argument("--needles", type=int, default=9)
    parser.add_argument("--data-dir", help="build the store here once and reuse it")
    parser.add_argument("--repeat", type=int, default=5, help="runs of the newest-100 pair")
    parser.add_argument("--spark", action="store_true", help="the same pairs through Spark")
    parser.add_argument("--consolidate", type=int, help="then consolidate to this many bytes")
    parser.add_argument("--rollups", action="store_true", help="a roll-up and its dashboard")
    args = parser.parse_args()
    quiet_logs()
    settings = {
        "rows": args.rows,
        "partitions": args.partitions,
        "segment_rows": args.segment_rows,
        "fpp": args.fpp,
        "rollups": args.rollups,
    }
    store, build_s, temp = open_store(args, settings)
    try:
        warm(store)
        payload: dict[str, Any] = {
            "settings": settings,
            "build_s": build_s,
            "machine": {**machine_info(store.data_dir), "work_dir": "<tmp>"},
            "store_bytes": sum(s.bytes for s in store.spans(TOPIC)),
            "needle": needles(store, settings, args.needles),
            "newest": newest(store, args.repeat),
        }
        if args.spark:
            payload["spark"] = spark_pairs(store, settings, args.repeat)
        if args.rollups:
            if args.data_dir is not None:  # the roll-up topic is consolidated: build again
                (Path(args.data_dir) / SETTINGS_FILE).unlink(missing_ok=True)
            payload["dashboard"] = dashboard(store, args.repeat)
        if args.consolidate:
            if args.data_dir is not None:
                (Path(args.data_dir) / SETTINGS_FILE).unlink(missing_ok=True)  # rewritten now
            payload["consolidation"] = consolidate(store, settings, args.consolidate)
            payload["needle_after_consolidation"] = needles(store, settings, args.needles)
    finally:
        store.close()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    needle = payload["needle"]
    print(
        f"{needle['segments']} segments; needle opened {needle['opened_share_mean']:.2%} of "
        f"them on average (max {needle['opened_share_max']:.2%}); "
        f"{needle['pruned_median_s'] * 1000:.1f} ms vs {needle['unpruned_median_s']:.2f} s "
        f"without pruning: {needle['speedup']:.0f}x",
        file=sys.stderr,
    )
    top = payload["newest"]
    print(
        f"newest 100: {top['early_median_s'] * 1000:.1f} ms, {top['opened']} segments opened, "
        f"vs {top['full_sort_median_s']:.2f} s for a full sort: {top['speedup']:.0f}x",
        file=sys.stderr,
    )
    if "consolidation" in payload:
        done, after = payload["consolidation"], payload["needle_after_consolidation"]
        print(
            f"consolidation: {done['segments_before']} -> {done['segments_after']} segments "
            f"({done['reduction']:.0f}x fewer) in {done['seconds']:.1f} s "
            f"({done['mb_per_s']:.0f} MB/s); needle then {after['pruned_median_s'] * 1000:.1f} ms "
            f"vs {after['unpruned_median_s']:.2f} s ({after['speedup']:.0f}x)",
            file=sys.stderr,
        )
    if "dashboard" in payload:
        board = payload["dashboard"]
        print(
            f"error dashboard: raw {median(board['raw_s']):.2f} s, roll-up "
            f"{median(board['rollup_sealed_s']):.2f} s as sealed "
            f"({board['speedup_sealed']:.1f}x, {board['rollup_segments_sealed']} segments), "
            f"{median(board['rollup_consolidated_s']) * 1000:.1f} ms consolidated "
            f"({board['speedup_consolidated']:.0f}x); rows {board['rows_cut']:.0f}x fewer",
            file=sys.stderr,
        )
    for name, pair in payload.get("spark", {}).items():
        print(
            f"spark {name}: {median(pair['pushdown_s']):.2f} s vs "
            f"{median(pair['no_pushdown_s']):.2f} s without pushdown: {pair['speedup']:.1f}x",
            file=sys.stderr,
        )
    print(write_results("pruning", payload))


if __name__ == "__main__":
    main()
