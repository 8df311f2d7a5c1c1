"""The demo application: JSON log events keyed by service, produced at a steady rate until
stopped or for a number of seconds."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator

import structlog

from bridge.demo.producer import Record, produce
from bridge.local_kafka.topics import create_topic
from bridge.serve import install_stop_handlers

log = structlog.get_logger(__name__)

_SERVICES = ("checkout", "search", "auth", "catalog")
_LEVELS = ("debug", "info", "info", "info", "warn", "error")
# The producer hands Kafka this many seconds of events at a time and waits for their
# acknowledgements: a stop request is honoured within about this long, and what it reports
# as produced is what the broker holds.
PRODUCER_CHUNK_S = 1.0
_PROGRESS_EVERY_S = 10.0


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


def paced(events: Iterator[Record], rate: int) -> Iterator[Record]:
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


def run_producer(
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: int,
    rate: int,
    seconds: float | None,
) -> int:
    """`plateau demo-producer`: create the topic, then produce until stopped or done;
    returns how many events the broker acknowledged."""
    stop = threading.Event()
    restore = _stop_on_signals(stop)
    try:
        # Creating it here (instead of relying on the broker's auto-creation) gives it the
        # partitions asked for, and plateau a topic to assign as soon as it exists.
        create_topic(bootstrap_servers, topic, partitions, exist_ok=True)
        log.info(
            "demo_producer_started",
            topic=topic,
            bootstrap_servers=bootstrap_servers,
            partitions=partitions,
            rate=rate,
            seconds=seconds,
        )
        started = time.monotonic()
        produced = produce_demo_events(
            bootstrap_servers, topic, rate=rate, seconds=seconds, stop=stop
        )
    finally:
        restore()
    log.info(
        "demo_producer_stopped",
        topic=topic,
        records=produced,
        seconds=round(time.monotonic() - started, 3),
        signalled=stop.is_set(),
    )
    return produced


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
        events = _until(stop, paced(sample_events(produced, size), rate))
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
