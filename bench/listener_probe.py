"""The Kafka API listener's own cost per produced batch, in process: produce requests shaped as
the Java client sends them with its defaults at 1 KiB (acks=all, idempotent, 8 partitions
of one 15-record batch each, 5 requests in flight) handed to the listener's request handler
on its event loop, through the real sink, writer, journal (synced) and seals.

Reported per round: the listener thread's CPU time (its event loop: parsing, checking,
appending, the journal's answers, the responses) per request and per batch, and the wall
time. With --profile, cProfile of the listener thread's work over every round, by function.
`--records` and `--batches` change the request's shape (records per batch, partitions per
request); `--topic-partitions N`: the topic has N partitions and each request writes the next
`--batches` of them in turn (a store of many partitions, each request a few of them).

    .venv/bin/python bench/listener_probe.py --requests 1200 --rounds 3
    .venv/bin/python bench/listener_probe.py --requests 1500 --rounds 2 --topic-partitions 512
    .venv/bin/python bench/listener_probe.py --requests 3000 --rounds 2 --size 128 \\
        --records 1 --batches 1
    .venv/bin/python bench/listener_probe.py --requests 1200 --rounds 1 --profile 25
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import gc
import io
import pstats
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema
from kio.serial import entity_writer

from bridge.config import parse_config
from bridge.kafka_api.connection import Connection
from bridge.kafka_api.encoding import build
from bridge.kafka_api.server import KafkaApiServer
from bridge.logs import configure_logging
from bridge.store import open_store

PARTITIONS = 8  # written by each request
RECORDS = 15  # a 16 KiB batch of 1 KiB records
IN_FLIGHT = 5
VERSION = 11
WARMUP = 200


def value(size: int) -> bytes:
    """A record's value: one repeated byte (bench/seal_cpu_probe.py puts random letters
    here, which the adaptive codec writes uncompressed as serve's benchmark data)."""
    return b"x" * size


def batch(producer_id: int, sequence: int, size: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        batch_size=1 << 30,
    )
    now = int(time.time() * 1000)
    for i in range(RECORDS):
        builder.append(i, timestamp=now + i, key=None, value=value(size), headers=[])
    return bytes(builder.build())


def frames(count: int, producer_id: int, size: int, topic_partitions: int) -> list[bytes]:
    """`count` produce requests (without their size prefix), each to the next PARTITIONS of
    the topic's, sequences following on."""
    request_type: Any = load_request_schema(0, VERSION)
    header_type: Any = request_type.__header_schema__
    sequences: collections.Counter[int] = collections.Counter()
    found = []
    for n in range(count):
        written = [(n * PARTITIONS + p) % topic_partitions for p in range(PARTITIONS)]
        data = []
        for p in written:
            data.append({"index": p, "records": batch(producer_id, sequences[p], size)})
            sequences[p] += RECORDS
        out = io.BytesIO()
        entity_writer(header_type)(
            out,
            header_type(
                request_api_key=0,
                request_api_version=VERSION,
                correlation_id=n,
                client_id="producer-1",
            ),
        )
        body = {
            "acks": -1,
            "timeout": 30_000,
            "topic_data": [
                {
                    "name": "t",
                    "partition_data": data,
                }
            ],
        }
        entity_writer(request_type)(out, build(request_type, body))
        found.append(out.getvalue())
    return found


async def drive(
    server: KafkaApiServer, requests: list[bytes], profile: cProfile.Profile | None
) -> tuple[float, float, float]:
    """Hand `requests` to the listener, IN_FLIGHT at a time; (thread CPU s, of it in the
    kernel s, wall s)."""
    conn = Connection("probe", server.api)
    handler = server.requests
    assert handler is not None  # started
    waiting: collections.deque[asyncio.Future[bytes | None]] = collections.deque()
    kernel = resource.getrusage(resource.RUSAGE_THREAD).ru_stime
    started, cpu = time.perf_counter(), time.thread_time()
    if profile is not None:
        profile.enable()
    for frame in requests:
        waiting.append(await handler.answer(conn, memoryview(frame)))
        if len(waiting) >= IN_FLIGHT:
            assert await waiting.popleft() is not None
    while waiting:
        await waiting.popleft()
    if profile is not None:
        profile.disable()
    kernel = resource.getrusage(resource.RUSAGE_THREAD).ru_stime - kernel
    return time.thread_time() - cpu, kernel, time.perf_counter() - started


def one(
    work: Path, count: int, size: int, topic_partitions: int, profile: cProfile.Profile | None
) -> dict[str, float]:
    config = parse_config(
        {
            "storage": {"data_dir": str(work), "memory_budget": "512MiB"},
            "kafka_api": {"listen": "127.0.0.1:0"},
            "topics": [{"name": "t", "partitions": topic_partitions}],
            "metrics": {"enabled": False},
        }
    )
    store = open_store(config)
    server = KafkaApiServer(config, store)
    try:
        server.start()
        producer_id = store.manifest.next_producer_id()
        every = frames(WARMUP + count, producer_id, size, topic_partitions)
        loop = server._loop
        assert loop is not None
        asyncio.run_coroutine_threadsafe(drive(server, every[:WARMUP], None), loop).result()
        cpu, kernel, wall = asyncio.run_coroutine_threadsafe(
            drive(server, every[WARMUP:], profile), loop
        ).result()
    finally:
        server.stop()
        store.close()
    batches = count * PARTITIONS
    return {
        "cpu_us_per_request": cpu / count * 1e6,
        "cpu_us_per_batch": cpu / batches * 1e6,
        "kernel_us_per_request": kernel / count * 1e6,
        "wall_us_per_request": wall / count * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    global RECORDS, PARTITIONS  # what batch() and frames() build
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--records", type=int, default=RECORDS, help="records per batch")
    parser.add_argument("--batches", type=int, default=PARTITIONS, help="partitions per request")
    parser.add_argument("--topic-partitions", type=int, help="the topic's (default: --batches)")
    parser.add_argument("--profile", type=int, default=0, help="top N functions (cProfile)")
    args = parser.parse_args(argv)
    RECORDS, PARTITIONS = args.records, args.batches
    topic_partitions = args.topic_partitions or PARTITIONS
    # As the benches run serve: its log level, and its garbage collector settings.
    configure_logging("WARNING")
    gc.freeze()
    gc.set_threshold(100_000, 20, 20)
    profile = cProfile.Profile() if args.profile else None
    runs = []
    for index in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="plateau-listener-probe-") as tmp:
            runs.append(one(Path(tmp), args.requests, args.size, topic_partitions, profile))
        row = runs[-1]
        print(
            f"round {index}: {row['cpu_us_per_request']:7.1f} us CPU/request  "
            f"{row['cpu_us_per_batch']:6.1f} us CPU/batch  "
            f"(kernel {row['kernel_us_per_request']:5.1f} us/request)  "
            f"{row['wall_us_per_request']:7.1f} us wall/request",
            flush=True,
        )
    median = statistics.median(r["cpu_us_per_batch"] for r in runs)
    kernel = statistics.median(r["kernel_us_per_request"] for r in runs)
    print(
        f"median: {median:.1f} us CPU per batch ({median * PARTITIONS:.0f} per request, "
        f"{kernel:.0f} of it in the kernel)"
    )
    if profile is not None:
        stats = pstats.Stats(profile, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(args.profile)
        stats.sort_stats("cumulative").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
