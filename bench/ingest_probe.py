"""The profile side of bench/ingest_bench.py, run as its own process; prints one JSON line.

    python bench/ingest_probe.py stages --bootstrap B --topic T --records N --group G --data-dir D
    python bench/ingest_probe.py worker --bootstrap B --topic T --expected N --group G --data-dir D

`stages` replays the worker's per-message path in-process, one stage at a time, on the same
messages held in memory: the consume loop, the worker's grouping by partition, the raw
decoder's columns one by one, `normalize_batch`, and `Writer.append` into a real store (seals
run on the writer's threads as in `plateau serve`). Each stage is timed on its own, so the
cost per message of every step of the path is measured without a sampling profiler.

`worker` runs bridge.consume.worker.Worker in-process (no `plateau serve` around it) until every
record is sealed, timing the garbage collector through gc.callbacks.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from confluent_kafka import Consumer, Message
from ingest_ceiling import POLL_BATCH, GcTimer, check, cpu_s, thread_cpu

from bridge.config import parse_config
from bridge.consume.build import build_worker
from bridge.consume.messages import header_array, kafka_timestamps, records_of
from bridge.consume.worker import by_partition
from bridge.ingest.decode.raw import RawDecoder
from bridge.ingest.records import Kept
from bridge.logs import configure_logging
from bridge.serve import tune_gc
from plateau_core import NoListener, RollPolicy, SealedSegment, Store, WriterPolicy
from plateau_core.policies import Compression
from plateau_core.schema import normalize_batch

# --- the worker's path, stage by stage -----------------------------------------------------------


class _Sealed(NoListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.segments: list[SealedSegment] = []

    def on_sealed(self, segment: SealedSegment) -> None:
        with self.lock:
            self.segments.append(segment)


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    cpu = cpu_s()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started, cpu_s() - cpu


def _group(polls: Sequence[list[Message]]) -> list[dict[tuple[str, int], list[Message]]]:
    """Bridge Worker._ingest's grouping: errors dropped, runs of (topic, partition) joined."""
    return [dict(by_partition(messages)) for messages in polls]


def stages(
    bootstrap: str,
    topic: str,
    limit: int,
    group: str,
    data_dir: Path,
    compression: str,
    max_age_s: float,
    properties: dict[str, str],
) -> None:
    configure_logging("WARNING")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "isolation.level": "read_committed",
            **properties,
        }
    )
    consumer.subscribe([topic])
    polls: list[list[Message]] = []
    records = 0
    consume_s = 0.0
    consume_cpu = 0.0
    waiting = True
    deadline = time.monotonic() + 300
    while records < limit and time.monotonic() < deadline:
        cpu = cpu_s()
        started = time.perf_counter()
        messages = consumer.consume(num_messages=POLL_BATCH, timeout=1.0)
        if waiting and not messages:
            continue  # the group join and first fetch are startup, not per-message cost
        waiting = False
        consume_s += time.perf_counter() - started
        consume_cpu += cpu_s() - cpu
        kept = [m for m in messages if check(m)]
        if kept:
            polls.append(kept)
            records += len(kept)
    consumer.close()
    # The fetched messages stay alive for the whole replay; frozen, the collector does not
    # scan them again and again (the worker holds one poll at a time, not a million messages).
    gc.collect()
    gc.freeze()
    n = records
    results: dict[str, Any] = {"records": n, "polls": len(polls)}

    def put(name: str, wall: float, cpu: float) -> None:
        results[name] = {"s": wall, "cpu_s": cpu, "us_per_record": wall / n * 1e6}

    put("consume", consume_s, consume_cpu)

    def touch() -> None:
        total = 0
        for messages in polls:
            for message in messages:
                if message.error() is not None:
                    continue
                value = message.value()
                total += 0 if value is None else len(value)
                message.offset()
                message.timestamp()

    put("touch_value_offset_timestamp", *_timed(touch))
    grouped: list[dict[tuple[str, int], list[Message]]] = []

    def group_all() -> None:
        grouped.extend(_group(polls))

    put("worker_group_by_partition", *_timed(group_all))
    keyed = [(key[1], g) for per_poll in grouped for key, g in per_poll.items()]
    groups = [g for _, g in keyed]
    results["groups"] = len(groups)
    results["mean_group_size"] = n / max(1, len(groups))
    kept = Kept(key=True, headers=True)

    # The envelope's columns one at a time (what records_of builds for the decoder).
    parts: dict[str, Callable[[list[Message]], object]] = {
        "decode.offset_column": lambda ms: pa.array(list(map(Message.offset, ms)), pa.int64()),
        "decode.timestamp_column": kafka_timestamps,
        "decode.key_column": lambda ms: pa.array(list(map(Message.key, ms)), pa.binary()),
        "decode.headers_column": header_array,
        "decode.value_column": lambda ms: pa.array(list(map(Message.value, ms)), pa.binary()),
    }
    for name, part in parts.items():
        put(name, *_timed(lambda part=part: [part(g) for g in groups]))  # type: ignore[misc]
    put("decode.records_of", *_timed(lambda: [records_of(g) for g in groups]))
    decoder = RawDecoder(kept)
    batches: list[pa.RecordBatch] = []

    def decode_all() -> None:
        for g in groups:
            batches.extend(decoder.decode(records_of(g)).batches)

    put("decode.total", *_timed(decode_all))
    put("normalize_batch", *_timed(lambda: [normalize_batch(b) for b in batches]))

    def offsets_after_append() -> None:
        # Landing.land reads the last offset of every appended batch with .as_py()
        for b in batches:
            b.column("offset")[b.num_rows - 1].as_py()

    put("worker_next_offset", *_timed(offsets_after_append))

    store = Store.open(data_dir)
    listener = _Sealed()
    writer = store.writer(WriterPolicy(compression=cast(Compression, compression)), listener)
    for partition in sorted({partition for partition, _ in keyed}):
        writer.acquire(topic, partition, roll=RollPolicy(max_age_s=max_age_s))
    order = [partition for partition, _ in keyed]
    cpu_before = cpu_s()
    wall_before = time.perf_counter()
    append_s = 0.0
    for partition, batch in zip(order, batches, strict=True):
        started = time.perf_counter()
        writer.append(topic, partition, batch)
        append_s += time.perf_counter() - started
    appended = time.perf_counter()
    writer.flush(timeout_s=300)
    flushed = time.perf_counter()
    cpu_all = cpu_s() - cpu_before
    writer.close()
    store.close()
    results["writer.append"] = {"s": append_s, "us_per_record": append_s / n * 1e6}
    results["writer.append_then_flush"] = {
        "s": flushed - wall_before,
        "append_loop_s": appended - wall_before,
        "flush_wait_s": flushed - appended,
        "cpu_s": cpu_all,
        "us_per_record": (flushed - wall_before) / n * 1e6,
        "cpu_us_per_record": cpu_all / n * 1e6,
    }
    seals = listener.segments
    results["seals"] = {
        "segments": len(seals),
        "seconds_sum": sum(s.seconds for s in seals),
        "bytes": sum(s.size_bytes for s in seals),
        "rows": sum(s.record_count for s in seals),
    }
    print(json.dumps(results))


# --- the real worker, in-process ----------------------------------------------------------------


def worker(
    bootstrap: str,
    topic: str,
    expected: int,
    group: str,
    data_dir: Path,
    max_age: str,
    properties: dict[str, str],
    gc_default: bool,
) -> None:
    """bridge.consume.worker.Worker.run() in this process until `expected` records are sealed, with
    the garbage collector's time measured (what a sampling profiler does not show).

    The collector is tuned as `plateau serve` tunes it (bridge.serve.tune_gc), or, with
    `gc_default`, left at Python's defaults, to measure what the tuning saves.
    """
    configure_logging("WARNING")
    config = parse_config(
        {
            "kafka": {"bootstrap_servers": bootstrap, "group_id": group, **properties},
            "storage": {"data_dir": str(data_dir)},
            "defaults": {"roll": {"max_age": max_age}},
            "topics": [{"source": topic, "format": "raw"}],
            "shutdown_timeout": "60s",
        }
    )
    store = Store.open(data_dir)
    stop = threading.Event()
    done: list[float] = []

    def watch() -> None:
        with Store.open(data_dir) as probe:
            while not stop.is_set():
                if sum(s.next_offset for s in probe.spans(topic)) >= expected:
                    done.append(time.monotonic())
                    stop.set()
                    return
                time.sleep(0.05)

    runner = build_worker(config, store, stop)
    if not gc_default:
        tune_gc()
    started = time.monotonic()
    cpu = cpu_s()
    watcher = threading.Thread(target=watch, name="bench-watch", daemon=True)
    watcher.start()
    with GcTimer() as collector:
        runner.run()
    store.close()
    wall = (done[0] if done else time.monotonic()) - started
    print(
        json.dumps(
            {
                "records": runner.stats.records,
                "wall_s": round(wall, 3),
                "records_per_s": round(expected / wall),
                "cpu_s": round(cpu_s() - cpu, 2),
                "thread_cpu_s": thread_cpu(),
                "gc": collector.report(),
                "gc_thresholds": gc.get_threshold(),
                "gc_default": gc_default,
                "gc_frozen_objects": gc.get_freeze_count(),
            }
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("stages", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--bootstrap", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--group", required=True)
        p.add_argument("--property", action="append", default=[], help="librdkafka k=v")
        p.add_argument("--data-dir", type=Path, required=True)
        if name == "worker":
            p.add_argument("--expected", type=int, required=True)
            p.add_argument("--max-age", default="1s")
            p.add_argument("--gc-default", action="store_true", help="do not tune the collector")
        else:
            p.add_argument("--records", type=int, required=True)
            p.add_argument("--compression", default="lz4")
            p.add_argument("--max-age", type=float, default=1.0)
    args = parser.parse_args(argv)
    properties = dict(p.split("=", 1) for p in args.property)
    if args.command == "worker":
        worker(
            args.bootstrap,
            args.topic,
            args.expected,
            args.group,
            args.data_dir,
            args.max_age,
            properties,
            args.gc_default,
        )
    else:
        stages(
            args.bootstrap,
            args.topic,
            args.records,
            args.group,
            args.data_dir,
            args.compression,
            args.max_age,
            properties,
        )
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown of millions of objects: not part of the measurement


if __name__ == "__main__":
    sys.exit(main())
