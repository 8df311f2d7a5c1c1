"""`plateau demo`: the main job on embedded defaults, on a machine with nothing but Java.

It starts the local Kafka broker, a demo producer that writes JSON log events for a short
while (as an existing application would), and `plateau serve` landing them. With
`direct=True` there is no broker: the producer writes to plateau's own Kafka API. While it runs it
prints a progress line a second (records landed per second, lag); at the end it prints the
status table and a query of the store, and checks that every produced record landed exactly
once.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc
import structlog
from confluent_kafka import Consumer, KafkaException, TopicPartition

from bridge.config import Config, parse_config
from bridge.demo.events import paced, sample_events
from bridge.demo.producer import Record, produce
from bridge.local_kafka import LocalKafka, free_port
from bridge.local_kafka.topics import create_topic
from bridge.logs import configure_logging
from bridge.ops.status import collect, render
from bridge.ops.telemetry import parse_dump
from bridge.ops.worker_status import read_status_files
from bridge.serve import serve
from plateau_core import Store

log = structlog.get_logger(__name__)

DEMO_TOPIC = "plateau-demo-events"
PROGRESS_EVERY_S = 1.0


def demo_config(
    bootstrap: str, data_dir: Path, *, listen: str | None = None, partitions: int = 4
) -> Config:
    """Consume DEMO_TOPIC from `bootstrap`, or with `listen`, take it on the Kafka API."""
    topic: dict[str, object] = {"format": "json", "timestamp": "field:ts", "on_error": "skip"}
    if listen is None:
        topic["source"] = DEMO_TOPIC
    else:
        topic |= {"name": DEMO_TOPIC, "partitions": partitions}
    return parse_config(
        {
            "kafka": {"bootstrap_servers": bootstrap, "group_id": "plateau-demo"},
            "storage": {"data_dir": str(data_dir), "memory_budget": "256MiB"},
            # The direct mode keeps the listener's own roll (produced topics seal every second).
            "defaults": {"roll": {"max_age": "2s"} if listen is None else {}}
            | {"retention": {"max_age": "1d"}},
            "topics": [topic],
            **({"kafka_api": {"listen": listen}} if listen is not None else {}),
            # Any free port (serve logs the URL): the demo must not fail because a plateau
            # already runs on this machine with the default one.
            "metrics": {"listen": "127.0.0.1:0"},
        }
    )


def run_demo(
    *,
    seconds: float = 10.0,
    rate: int = 20_000,
    partitions: int = 4,
    data_dir: Path | None = None,
    verbose: bool = False,
    log_format: str = "auto",
    direct: bool = False,
) -> int:
    """Run the demo end to end; 0 when every produced event landed exactly once."""
    if not verbose:
        # The progress lines say what serve's INFO lines would; its warnings still show.
        configure_logging("WARNING", log_format)
    with tempfile.TemporaryDirectory(prefix="plateau-demo-") as tmp:
        data_dir = data_dir or Path(tmp) / "data"
        if direct:
            listen = f"127.0.0.1:{free_port()}"
            print(f"plateau's Kafka API at {listen}; plateau store in {data_dir}")
            config = demo_config(listen, data_dir, listen=listen, partitions=partitions)
            return _run(config, listen, seconds, rate, direct=True)
        with LocalKafka(Path(tmp) / "kafka", tie_to_parent=True) as broker:
            bootstrap = broker.bootstrap_servers
            print(f"local Kafka broker at {bootstrap}; plateau store in {data_dir}")
            create_topic(bootstrap, DEMO_TOPIC, partitions, exist_ok=True)
            return _run(demo_config(bootstrap, data_dir), bootstrap, seconds, rate, direct=False)


def _run(config: Config, bootstrap: str, seconds: float, rate: int, *, direct: bool) -> int:
    stop = threading.Event()
    server = threading.Thread(target=serve, args=(config, 1, stop), name="serve")
    server.start()
    progress = Progress(config.storage.data_dir, bootstrap, DEMO_TOPIC, direct=direct)
    progress.start()
    try:
        if direct:
            # The producer would otherwise log a refused connection or two while serve
            # replays its journal and opens the listener.
            _wait_listening(bootstrap, timeout_s=60)
        produced = _produce_for(bootstrap, seconds, rate)
        print(f"produced {produced} events to {DEMO_TOPIC!r}; waiting until sealed")
        landed = _wait_landed(config, DEMO_TOPIC, produced, timeout_s=120)
    finally:
        progress.stop()
        stop.set()
        server.join()
    document, error = collect(config)
    print(render(document, as_json=False))
    if error and not direct:
        print(error)
    _summary(config.storage.data_dir)
    if landed != produced:
        print(f"FAILED: {landed} of {produced} produced events landed")
        return 1
    print(f"every produced event landed exactly once ({produced} records)")
    return 0


def _wait_listening(address: str, timeout_s: float) -> None:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)


class Progress:
    """Prints, once a second, how many records serve consumed (received, in the direct mode)
    and how fast, how many are in sealed segments (what a query sees), and how far those
    trail what Kafka holds (what the listener took)."""

    def __init__(self, data_dir: Path, bootstrap: str, topic: str, *, direct: bool = False) -> None:
        self.data_dir = data_dir
        self.topic = topic
        self.direct = direct
        self._consumer = (
            None
            if direct
            else Consumer(
                {"bootstrap.servers": bootstrap, "group.id": "plateau-demo-progress"}, logger=None
            )
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="demo-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._consumer is not None:
            self._consumer.close()

    def _loop(self) -> None:
        started = time.monotonic()
        previous = 0
        taken = "received" if self.direct else "consumed"
        while not self._stop.wait(PROGRESS_EVERY_S):
            consumed = self._consumed()
            sealed, watermarks = self._sealed()
            held = self._held()
            lag = "?" if held is None else f"{max(0, held - sum(watermarks.values())):,}"
            print(
                f"{time.monotonic() - started:5.1f} s  {taken} {consumed:>9,} "
                f"({(consumed - previous) / PROGRESS_EVERY_S:>7,.0f}/s)  "
                f"sealed {sealed:>9,}  lag {lag}",
                flush=True,
            )
            previous = consumed

    def _consumed(self) -> int:
        """Records the workers appended, from their status files (rewritten every second)."""
        total = 0.0
        for worker in read_status_files(self.data_dir):
            # The Kafka API listener counts what it took per topic.
            total += float((worker.get("kafka-api") or {}).get("records", {}).get(self.topic, 0))
            counters, _ = parse_dump(worker.get("telemetry", {}))
            total += sum(
                value
                for (name, labels), value in counters
                if name == "records_ingested" and labels[0] == self.topic
            )
        return int(total)

    def _sealed(self) -> tuple[int, dict[int, int]]:
        """Records in sealed segments, and each partition's watermark."""
        if not (self.data_dir / "manifest.db").exists():
            return 0, {}
        with Store.open(self.data_dir) as store:
            spans = store.spans(self.topic)
        return sum(s.records for s in spans), {s.partition: s.next_offset for s in spans}

    def _held(self) -> int | None:
        """The records Kafka holds in the topic (its end offsets), or None if it did not
        answer in time. In the direct mode: what the listener took."""
        if self._consumer is None:
            return self._consumed()
        try:
            topic = self._consumer.list_topics(self.topic, timeout=1).topics[self.topic]
            return sum(
                self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=1)[1]
                for p in topic.partitions
            )
        except (KafkaException, KeyError):
            return None


def _produce_for(bootstrap: str, seconds: float, rate: int) -> int:
    events: Iterator[Record] = paced(sample_events(0, int(seconds * rate)), rate)
    produced = produce(bootstrap, DEMO_TOPIC, events)
    log.info("demo_produced", topic=DEMO_TOPIC, records=produced)
    return produced


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
