"""`plateau demo`: the main job on embedded defaults, on a machine with nothing but Java.

It starts the local Kafka broker, a demo producer that writes JSON log events for a short
while (as an existing application would), and `plateau serve` landing them; at the end it
prints the status and checks that every produced record landed exactly once.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc
import structlog

from bridge.config import Config, parse_config
from bridge.local_kafka import LocalKafka
from bridge.produce import Record, produce
from bridge.serve import serve
from bridge.status import collect, render
from bridge.topics import create_topic
from plateau_core import Store

log = structlog.get_logger(__name__)

DEMO_TOPIC = "plateau-demo-events"
_SERVICES = ("checkout", "search", "auth", "catalog")
_LEVELS = ("debug", "info", "info", "info", "warn", "error")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="local broker + demo producer + plateau serve, end to end"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to produce")
    parser.add_argument("--rate", type=int, default=20_000, help="events per second")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="keep the store here (default: temporary)"
    )
    parser.set_defaults(handler=run)


def sample_events(start: int, count: int, seed: int = 7) -> Iterator[Record]:
    """JSON log events keyed by service, like an application would write."""
    rng = random.Random(seed + start)  # noqa: S311 - sample data, not secrets
    now_ms = int(time.time() * 1000)
    for i in range(start, start + count):
        service = rng.choice(_SERVICES)
        event = {
            "seq": i,
            "ts": now_ms + (i - start) // 20,
            "service": service,
            "level": rng.choice(_LEVELS),
            "latency_ms": round(rng.expovariate(1 / 40), 2),
            "message": f"request {i} handled",
        }
        yield Record(
            value=json.dumps(event).encode(),
            key=f"host-{i % 8}".encode(),
            headers=(("source", b"plateau-demo"),),
        )


def demo_config(bootstrap: str, data_dir: Path) -> Config:
    return parse_config(
        {
            "kafka": {"bootstrap_servers": bootstrap, "group_id": "plateau-demo"},
            "storage": {"data_dir": str(data_dir), "memory_budget": "256MiB"},
            "defaults": {"roll": {"max_age": "2s"}, "retention": {"max_age": "1d"}},
            "topics": [
                {
                    "source": DEMO_TOPIC,
                    "format": "json",
                    "timestamp": "field:ts",
                    "on_error": "skip",
                }
            ],
        }
    )


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="plateau-demo-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        with LocalKafka(Path(tmp) / "kafka", tie_to_parent=True) as broker:
            bootstrap = broker.bootstrap_servers
            print(f"local Kafka broker at {bootstrap}; plateau store in {data_dir}")
            create_topic(bootstrap, DEMO_TOPIC, args.partitions, exist_ok=True)
            config = demo_config(bootstrap, data_dir)
            stop = threading.Event()
            server = threading.Thread(target=serve, args=(config, 1, stop), name="serve")
            server.start()
            try:
                produced = _produce_for(bootstrap, args.seconds, args.rate)
                print(f"produced {produced} events to {DEMO_TOPIC!r}; waiting until sealed")
                landed = _wait_landed(config, DEMO_TOPIC, produced, timeout_s=120)
            finally:
                stop.set()
                server.join()
            document, error = collect(config)
            print(render(document, as_json=False))
            if error:
                print(error)
            _summary(data_dir)
            if landed != produced:
                print(f"FAILED: {landed} of {produced} produced events landed")
                return 1
            print(f"every produced event landed exactly once ({produced} records)")
    return 0


def _produce_for(bootstrap: str, seconds: float, rate: int) -> int:
    produced = produce(bootstrap, DEMO_TOPIC, _paced(sample_events(0, int(seconds * rate)), rate))
    log.info("demo_produced", topic=DEMO_TOPIC, records=produced)
    return produced


def _paced(events: Iterator[Record], rate: int) -> Iterator[Record]:
    """At most `rate` events per second, like a live application."""
    started = time.monotonic()
    for count, event in enumerate(events):
        if count % 1000 == 0:
            ahead = count / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        yield event


def _wait_landed(config: Config, topic: str, produced: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    landed = 0
    while time.monotonic() < deadline:
        with Store.open(config.storage.data_dir) as store:
            landed = sum(s.records for s in store.spans(topic))
        if landed >= produced:
            break
        time.sleep(0.5)
    return landed


def _summary(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        table = store.read(DEMO_TOPIC, columns=["seq", "level"]).to_table()
    distinct = len(pc.unique(table.column("seq")))
    counts = table.group_by("level").aggregate([("seq", "count")]).to_pylist()
    levels = ", ".join(f"{r['level']}={r['seq_count']}" for r in sorted(counts, key=str))
    print(f"query of the store: {table.num_rows} rows, {distinct} distinct seq; {levels}")
