"""Peer of bench/ingest_bench.py: Quix Streams from Kafka into Parquet files; one JSON line.

    python bench/peer_quix.py --bootstrap B --topic T --expected N --out DIR [--group G]

What a Python stream-processing user would run to land a topic as files: a quixstreams
Application (fresh consumer group, auto_offset_reset "earliest", everything else default:
at-least-once, a checkpoint every 5 s) reading T with the bytes deserializer, turning each
record into a row {value, key, offset, partition} and sinking it with LocalFileSink and its
ParquetFormat (snappy, its default) under
DIR/data/<topic>/<partition>/<first_offset>.parquet. The sink adds `_timestamp` (the Kafka
timestamp in ms) and `_key`, the key decoded as UTF-8; for a record without a key it writes
the repr of its internal item object there, which is why the row carries the key itself as
well.

That sink keeps each partition's records in memory and writes one Parquet file per partition
at every checkpoint (plain writes, not fsynced); the consumer offsets are committed only
after the files are written. `app.run(count=N)` stops the loop after N records and then
commits a last, forced checkpoint, so when run() returns every record is in a file and
committed: that is `done` (it includes closing the consumer). `first_record` is when the
first record reached the processing function; `steady` holds the snapshots at 10% and 90% of
the records processed (not yet written: the sink writes at checkpoints). After `done`, not
timed, the Parquet files under DIR must hold exactly N rows, one per (partition, offset),
reported as `records`; otherwise the run fails.

Times are CLOCK_MONOTONIC, so the parent can relate them to its own. quixstreams pins
confluent-kafka (and so librdkafka) to an older release than plateau may use; the versions
are in the report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import quixstreams
from ingest_ceiling import STEADY, cpu_s, snapshot, thread_cpu
from quixstreams import Application, message_context
from quixstreams.models import HeadersTuples
from quixstreams.sinks.community.file.formats import ParquetFormat
from quixstreams.sinks.community.file.local import LocalFileSink

STARTED = time.monotonic()


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty; the sink must start fresh")
    out.mkdir(parents=True, exist_ok=True)
    # FileSink refuses a directory with characters outside [a-zA-Z0-9 ._/] (a "-" in a
    # temporary folder's name is enough), so it gets a relative one from inside DIR.
    os.chdir(out)

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group or f"bench-quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        state_dir=out / "_state",
        loglevel="WARNING",
    )
    topic = app.topic(args.topic, value_deserializer="bytes", key_deserializer="bytes")
    marks = {round(f * args.expected): name for f, name in zip(STEADY, "ab", strict=True)}
    seen = 0
    first: float | None = None
    steady: dict[str, dict[str, float]] = {}
    threads: dict[str, float] = {}

    def row(
        value: bytes, key: bytes | None, _timestamp: int, _headers: HeadersTuples
    ) -> dict[str, Any]:
        nonlocal seen, first
        context = message_context()
        seen += 1
        if seen == 1:
            first = time.monotonic()
        elif seen in marks:
            steady[marks[seen]] = snapshot(args.broker_pid)
        if seen == args.expected:
            # librdkafka's threads are gone once run() has closed the consumer.
            threads.update(thread_cpu())
        return {
            "value": value,
            "key": key,
            "offset": context.offset,
            "partition": context.partition,
        }

    sdf = app.dataframe(topic).apply(row, metadata=True)
    sdf.sink(LocalFileSink(directory="data", format=ParquetFormat()))
    app.run(count=args.expected, timeout=args.timeout, collect=False)
    done = time.monotonic()
    cpu_at_done = cpu_s()

    files = sorted((out / "data").rglob("*.parquet"))
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    if rows != args.expected or seen != args.expected:
        raise SystemExit(
            f"processed {seen} records and the Parquet files under {out} hold {rows} rows; "
            f"expected {args.expected} (a timeout of {args.timeout:.0f}s without records "
            "also stops the run)"
        )
    ids = pq.read_table(files, columns=["partition", "offset"])
    distinct = pc.count_distinct(
        pc.add(pc.multiply(ids["partition"].cast(pa.int64()), 1 << 40), ids["offset"])
    ).as_py()
    if distinct != rows:
        raise SystemExit(f"{rows - distinct} of {rows} rows are duplicates")
    return {
        "started": STARTED,
        "first_record": first,
        "done": done,
        "records": rows,
        "cpu_s_at_done": cpu_at_done,
        "thread_cpu_s_at_last_record": threads,
        "steady": steady,
        "files": len(files),
        "sink_bytes": sum(f.stat().st_size for f in files),
        "versions": {
            "quixstreams": quixstreams.__version__,
            "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0],
            "pyarrow": pa.__version__,
        },
        "config": {
            "commit_interval_s": app.config.commit_interval,
            "processing_guarantee": app.config.processing_guarantee,
            "parquet_compression": "snappy",
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--expected", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="Parquet folder (fresh)")
    parser.add_argument("--group", help="consumer group (default: a new one)")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="stop after this long without a record"
    )
    parser.add_argument("--broker-pid", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(run(args)))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: not part of the measurement


if __name__ == "__main__":
    sys.exit(main())
