"""Ingest throughput of `format: avro` against `format: raw` on the same bytes.

One run starts a local Apache Kafka broker (bridge.local_kafka, in a temporary folder) and
the test registry (tests/registry_server.py: confluent-kafka's in-memory registry over HTTP on
loopback), serializes `--records` orders with confluent-kafka's AvroSerializer (ten fields:
longs, strings, a double, a timestamp-millis, an enum, a nullable string, an array) and
produces the same bytes to one topic of `--partitions` partitions (not timed). Then, in
alternating order, `--repeat` times each:

- raw: `plateau serve --workers 1`, `format: raw`: the bytes land as a binary column;
- avro: the same with `format: avro`: schemas fetched, records decoded into columns.

Each case reads the topic from offset 0 in its own process with a fresh group and data_dir,
until the manifest holds every record as sealed segments; wall time runs from process start
to that moment (imports and group join included, as in bench/ingest_bench.py), then SIGTERM.
The ratio avro/raw of the medians is the number to read: both run in the same session, on the
same broker and bytes, so machine noise moves both.

A second, in-process part times the decoders alone on 10,000-record envelopes (no Kafka, no
writer): RawDecoder against SchemaDecoder, records/s.

    .venv/bin/python bench/schema_bench.py                       # 1M records, a few minutes
    .venv/bin/python bench/schema_bench.py --records 100000 --repeat 1
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))

from bridge.config.registry import SchemaRegistryConfig  # noqa: E402
from bridge.ingest.decode.raw import RawDecoder  # noqa: E402
from bridge.ingest.decode.registry import schema_source  # noqa: E402
from bridge.ingest.decode.schema_format import SchemaDecoder  # noqa: E402
from bridge.ingest.records import Kept, envelope  # noqa: E402
from bridge.local_kafka import LocalKafka  # noqa: E402
from bridge.local_kafka.broker import BrokerSettings  # noqa: E402
from bridge.local_kafka.topics import create_topic  # noqa: E402
from plateau_core import Store  # noqa: E402
from plateau_core.schema import HEADERS_TYPE, TIMESTAMP_TYPE  # noqa: E402
from tests.registry_server import RegistryServer  # noqa: E402

RESULTS_DIR = BENCH_DIR / "results"
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "quantity", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "country", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
BASE = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def order(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "customer": i * 7919 % 100_000,
        "item": f"item-{i % 997}",
        "quantity": i % 9 + 1,
        "price": (i % 10_000) / 100,
        "at": BASE + datetime.timedelta(milliseconds=i),
        "status": "PAID" if i % 3 else "NEW",
        "note": None if i % 4 else f"note {i}",
        "country": ("DE", "FR", "US", "JP")[i % 4],
        "tags": [f"t{i % 5}"] if i % 2 else [],
    }


def fill(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"}
    )
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("the broker did not take every record")


def serve_case(
    work: Path, bootstrap: str, registry: str, topic: str, fmt: str, records: int
) -> dict[str, Any]:
    data_dir = work / f"{fmt}-{uuid.uuid4().hex[:6]}"
    config = work / f"{data_dir.name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {
                    "bootstrap_servers": bootstrap,
                    "group_id": f"bench-{data_dir.name}",
                },
                "storage": {"data_dir": str(data_dir)},
                "defaults": {"roll": {"max_age": "1s"}},
                "schema_registry": {"url": registry},
                "topics": [{"source": topic, "format": fmt}],
            }
        )
    )
    argv = [sys.executable, "-m", "bridge.cli", "--log-level", "WARNING", "serve"]
    argv += ["--config", str(config), "--workers", "1"]
    started = time.monotonic()
    cpu_before = os.times()
    process = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.DEVNULL)
    done_s = None
    try:
        while process.poll() is None and time.monotonic() - started < 900:
            if data_dir.exists() and _landed(data_dir, topic) >= records:
                done_s = time.monotonic() - started
                break
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    cpu_after = os.times()
    if done_s is None:
        raise SystemExit(f"{fmt}: not every record landed (exit {process.returncode})")
    cpu = (cpu_after.children_user - cpu_before.children_user) + (
        cpu_after.children_system - cpu_before.children_system
    )
    size = sum(p.stat().st_size for p in data_dir.rglob("*.arrow"))
    return {
        "case": fmt,
        "seconds": round(done_s, 3),
        "records_per_s": round(records / done_s),
        "cpu_s": round(cpu, 2),
        "segment_bytes": size,
    }


def _landed(data_dir: Path, topic: str) -> int:
    try:
        with Store.open(data_dir) as store:
            return sum(s.next_offset for s in store.spans(topic))
    except Exception:
        return 0


def decode_only(registry: str, values: list[bytes], repeat: int) -> dict[str, float]:
    """records/s of each decoder over 10,000-record envelopes (median of `repeat` passes)."""
    chunks = []
    for start in range(0, len(values), 10_000):
        part = values[start : start + 10_000]
        n = len(part)
        chunks.append(
            envelope(
                pa.array(range(start, start + n), pa.int64()),
                pa.array([0] * n, TIMESTAMP_TYPE),
                pa.array([None] * n, pa.binary()),
                pa.array([None] * n, HEADERS_TYPE),
                pa.array(part, pa.binary()),
            )
        )
    source = schema_source(SchemaRegistryConfig(url=registry))
    found: dict[str, float] = {}
    for name in ("raw", "avro"):
        times = []
        for _ in range(repeat):
            decoder = (
                RawDecoder(Kept())
                if name == "raw"
                else SchemaDecoder(Kept(), source, "avro", "raw")
            )
            start = time.perf_counter()
            for chunk in chunks:
                decoder.decode(chunk)
            times.append(time.perf_counter() - start)
        found[name] = round(len(values) / statistics.median(times))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="plateau-schema-bench-") as tmp:
        work = Path(tmp)
        kafka = LocalKafka(work / "kafka", BrokerSettings(heap="1g"), tie_to_parent=True)
        kafka.start()
        registry = RegistryServer().start()
        try:
            result = run(work, kafka.bootstrap_servers, registry.url, args)
        finally:
            registry.stop()
            kafka.stop()
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = RESULTS_DIR / f"schema-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    print(f"written to {path.relative_to(REPO)}")


def run(work: Path, bootstrap: str, registry: str, args: argparse.Namespace) -> dict[str, Any]:
    client = SchemaRegistryClient({"url": registry})
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, args.partitions)
    serializer = AvroSerializer(client, json.dumps(SCHEMA))
    context = SerializationContext(topic, MessageField.VALUE)
    started = time.monotonic()
    values = [serializer(order(i), context) for i in range(args.records)]
    serialize_s = time.monotonic() - started
    fill(bootstrap, topic, values, args.partitions)
    runs: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        for fmt in ("raw", "avro"):
            runs.append(serve_case(work, bootstrap, registry, topic, fmt, args.records))
            print(json.dumps(runs[-1]), flush=True)
    decoders = decode_only(registry, values[: min(len(values), 200_000)], args.repeat)
    medians = {
        fmt: statistics.median(r["records_per_s"] for r in runs if r["case"] == fmt)
        for fmt in ("raw", "avro")
    }
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "pyarrow": pa.__version__,
            "revision": _revision(),
        },
        "records": args.records,
        "partitions": args.partitions,
        "value_bytes_mean": round(sum(map(len, values)) / len(values), 1),
        "serialize_records_per_s": round(args.records / serialize_s),
        "runs": runs,
        "decoders_records_per_s": decoders,
        "summary": {
            "serve_raw_records_per_s": round(medians["raw"]),
            "serve_avro_records_per_s": round(medians["avro"]),
            "serve_avro_over_raw": round(medians["avro"] / medians["raw"], 3),
            "decode_raw_records_per_s": decoders["raw"],
            "decode_avro_records_per_s": decoders["avro"],
        },
    }


def _revision() -> str:
    found = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip()


if __name__ == "__main__":
    main()
