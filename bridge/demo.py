"""`plateau demo`: the main job on embedded defaults, on a machine with nothing but Java.

It starts the local Kafka broker and writes sample events to a demo topic, the way an
existing producer would. The bridge that lands them in plateau joins this command as
soon as it exists; until then the command says so and stops the broker again.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import structlog

from bridge.local_kafka import LocalKafka
from bridge.produce import Record, produce
from bridge.topics import create_topic

log = structlog.get_logger(__name__)

DEMO_TOPIC = "plateau-demo-events"
_SERVICES = ("checkout", "search", "auth", "catalog")
_LEVELS = ("debug", "info", "info", "info", "warn", "error")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="start a local broker and produce sample events (embedded defaults)"
    )
    parser.add_argument("--records", type=int, default=50_000, help="sample events to produce")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--dir", type=Path, default=None, help="where the broker keeps its data")
    parser.set_defaults(handler=run)


def sample_events(count: int, seed: int = 7) -> Iterator[Record]:
    """Deterministic JSON log events keyed by service, like an application would write."""
    rng = random.Random(seed)  # noqa: S311 - sample data, not secrets
    now_ms = int(time.time() * 1000)
    for i in range(count):
        service = rng.choice(_SERVICES)
        event = {
            "seq": i,
            "service": service,
            "level": rng.choice(_LEVELS),
            "latency_ms": round(rng.expovariate(1 / 40), 2),
            "message": f"request {i} handled",
        }
        yield Record(
            value=json.dumps(event).encode(),
            key=service.encode(),
            headers=(("source", b"plateau-demo"),),
            timestamp_ms=now_ms + i,
        )


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="plateau-demo-") as tmp:
        work_dir = args.dir or Path(tmp) / "kafka"
        with LocalKafka(work_dir, tie_to_parent=True) as broker:
            bootstrap = broker.bootstrap_servers
            print(f"local Kafka broker up at {bootstrap}")
            create_topic(bootstrap, DEMO_TOPIC, args.partitions, exist_ok=True)
            started = time.monotonic()
            produced = produce(bootstrap, DEMO_TOPIC, sample_events(args.records))
            elapsed = time.monotonic() - started
            log.info("demo_produced", topic=DEMO_TOPIC, records=produced, seconds=round(elapsed, 2))
            print(
                f"produced {produced} sample events to {DEMO_TOPIC!r} "
                f"({args.partitions} partitions) in {elapsed:.1f}s"
            )
            print("the bridge that lands them in plateau is not built yet; stopping the broker")
    return 0
