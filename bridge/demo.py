"""`plateau demo`: the main job on embedded defaults, on a machine with nothing but Java.

It starts the local Kafka broker, a demo producer that writes JSON log events for a short
while (as an existing application would), and `plateau serve` landing them; at the end it
prints the status and checks that every produced record landed exactly once.

`plateau demo-producer` is that producer on its own, against any broker: the compose stack
runs it so that data flows as soon as the stack is up.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.compute as pc
import structlog

from bridge.config import Config, parse_config
from bridge.local_kafka import LocalKafka
from bridge.produce import Record, produce
from bridge.serve import install_stop_handlers, serve
from bridge.status import collect, render
from bridge.topics import create_topic
from plateau_core import Store
from plateau_core.errors import InvalidInputError
from plateau_core.names import validate_topic

log = structlog.get_logger(__name__)

DEMO_TOPIC = "plateau-demo-events"
_SERVICES = ("checkout", "search", "auth", "catalog")
_LEVELS = ("debug", "info", "info", "info", "warn", "error")
# The producer hands Kafka this many seconds of events at a time and waits for their
# acknowledgements: a stop request is honoured within about this long, and what it reports
# as produced is what the broker holds.
PRODUCER_CHUNK_S = 1.0
_PROGRESS_EVERY_S = 10.0


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

    producer = subparsers.add_parser(
        "demo-producer",
        help="write demo JSON log events to a Kafka topic until stopped (or for --seconds)",
    )
    producer.add_argument(
        "--bootstrap-servers",
        required=True,
        type=_bootstrap_servers,
        metavar="HOST:PORT[,...]",
        help="the Kafka brokers",
    )
    producer.add_argument("--topic", required=True, type=_topic, help="created if missing")
    producer.add_argument(
        "--partitions",
        type=_positive_int,
        default=4,
        help="partitions when the topic is created (default 4); an existing topic is kept",
    )
    producer.add_argument(
        "--rate", type=_positive_int, default=1000, help="events per second (default 1000)"
    )
    producer.add_argument(
        "--seconds",
        type=_positive_float,
        default=None,
        help="produce rate x seconds events, then exit (default: until SIGTERM or Ctrl-C)",
    )
    producer.set_defaults(handler=run_producer)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text!r}")
    return value


def _topic(text: str) -> str:
    try:
        return validate_topic(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bootstrap_servers(text: str) -> str:
    for server in text.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"expected host:port[,host:port...], got {text!r}")
    return text


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
            # Any free port (serve logs the URL): the demo must not fail because a plateau
            # already runs on this machine with the default one.
            "metrics": {"listen": "127.0.0.1:0"},
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
    # Checking the clock every 1000 events is cheap at high rates; at a few events per second
    # it would send each second's events in one burst, so low rates check more often.
    step = max(1, min(1000, rate // 50))
    started = time.monotonic()
    for count, event in enumerate(events):
        if count % step == 0:
            ahead = count / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        yield event


def run_producer(args: argparse.Namespace) -> int:
    """`plateau demo-producer`: create the topic, then produce until stopped or done."""
    stop = threading.Event()
    restore = _stop_on_signals(stop)
    try:
        # Creating it here (instead of relying on the broker's auto-creation) gives it the
        # partitions asked for, and plateau a topic to assign as soon as it exists.
        create_topic(args.bootstrap_servers, args.topic, args.partitions, exist_ok=True)
        log.info(
            "demo_producer_started",
            topic=args.topic,
            bootstrap_servers=args.bootstrap_servers,
            partitions=args.partitions,
            rate=args.rate,
            seconds=args.seconds,
        )
        started = time.monotonic()
        produced = produce_demo_events(
            args.bootstrap_servers, args.topic, rate=args.rate, seconds=args.seconds, stop=stop
        )
    finally:
        restore()
    log.info(
        "demo_producer_stopped",
        topic=args.topic,
        records=produced,
        seconds=round(time.monotonic() - started, 3),
        signalled=stop.is_set(),
    )
    return 0


def produce_demo_events(
    bootstrap_servers: str,
    topic: str,
    *,
    rate: int,
    seconds: float | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Produce `rate` sample events per second: `rate * seconds` of them, or (seconds=None)
    until `stop` is set. Returns how many the broker acknowledged."""
    stop = stop or threading.Event()
    total = None if seconds is None else max(1, round(seconds * rate))
    chunk = max(1, round(rate * PRODUCER_CHUNK_S))
    produced = 0
    reported = time.monotonic()
    while not stop.is_set() and (total is None or produced < total):
        size = chunk if total is None else min(chunk, total - produced)
        events = _until(stop, _paced(sample_events(produced, size), rate))
        produced += produce(bootstrap_servers, topic, events)
        if time.monotonic() - reported >= _PROGRESS_EVERY_S:
            reported = time.monotonic()
            log.info("demo_producer_progress", topic=topic, records=produced)
    return produced


def _until(stop: threading.Event, events: Iterator[Record]) -> Iterator[Record]:
    """`events` until `stop` is set: a stop ends the chunk at once, and produce() still
    waits for what it already sent."""
    for event in events:
        if stop.is_set():
            return
        yield event


def _stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM and SIGINT set `stop` (a second one exits at once); returns a function
    restoring the previous handlers.

    In a container the producer is process 1, to which the kernel never applies a signal's
    default action: without a handler, `docker stop` would wait out its timeout and kill it.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may set handlers; the caller owns `stop`
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    install_stop_handlers(stop)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


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
