"""kill -9 of `plateau serve` while an idempotent producer (librdkafka, acks=all) writes to
its Kafka API, repeated: every acknowledged record is stored once, at the offset its
acknowledgement named, and no record is stored twice, whether acks=all was answered from the
journal (replayed at each start) or from sealed segments. With poison in the stream, each
poison record is in the dead-letter topic once, naming the offset it was acknowledged at."""

from __future__ import annotations

import os
import random
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, Message, Producer

from bridge.local_kafka import free_port
from plateau_core import Store
from tests.bridge_support import serve_process
from tests.reliability.support import Audit, Recorder, scale


def wait_listening(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"serve did not listen on {port} within {timeout_s} s")


POISON_EVERY = 37


def value(i: int, poison: bool) -> bytes:
    if poison and i % POISON_EVERY == 0:
        return b"not json %d" % i
    return b'{"i": %d}' % i


def stored_keys(store: Store, topic: str, dead_letters: bool) -> dict[bytes, list[tuple[int, int]]]:
    """Each key's (partition, offset) places; a dead letter's is where it was produced."""
    places: dict[bytes, list[tuple[int, int]]] = {}
    for partition in range(3):
        read = store.read(topic, partitions=[partition], columns=["offset", "key", "headers"])
        for row in read.to_table().to_pylist():
            place = (partition, row["offset"])
            if dead_letters:
                headers = {h["key"]: h["value"] for h in row["headers"]}
                place = (
                    int(headers["plateau.error.partition"]),
                    int(headers["plateau.error.offset"]),
                )
            places.setdefault(row["key"], []).append(place)
    return places


def _merged_segments(data_dir: Path) -> int:
    """Consolidated segments of `events` now (named by their span, first-end)."""
    manifest = data_dir / "manifest.db"
    if not manifest.exists():
        return 0
    with sqlite3.connect(f"file:{manifest}?mode=ro", uri=True, timeout=10) as db:
        try:
            row = db.execute(
                "SELECT COUNT(*) FROM segments WHERE topic = 'events' AND path LIKE '%-%'"
            ).fetchone()
        except sqlite3.OperationalError:  # not created yet
            return 0
    return int(row[0])


@pytest.mark.parametrize(
    ("poison", "durability", "merging"),
    [
        (False, "journal", False),
        (True, "journal", False),
        (False, "segment", False),
        (False, "journal", True),
    ],
    ids=["clean", "poison-to-dlq", "clean-segment-durability", "consolidating"],
)
def test_kill_9_during_idempotent_produce(
    tmp_path: Path, reliability: Recorder, poison: bool, durability: str, merging: bool
) -> None:
    rng = random.Random(int(os.environ.get("PLATEAU_CRASH_SEED", "7")))
    port = free_port()
    data_dir = tmp_path / "data"
    config = tmp_path / "plateau.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                # Produced topics are consolidated by default, once segments are a minute
                # old; "consolidating" merges at once, every second, to be killed mid-merge.
                "storage": {"data_dir": str(data_dir)}
                | ({"consolidate_interval": "1s"} if merging else {}),
                "kafka_api": {"listen": f"127.0.0.1:{port}", "durability": durability},
                "metrics": {"listen": "127.0.0.1:0"},
                "topics": [
                    {"name": "events", "partitions": 3, "format": "json"}
                    | ({"on_error": "dlq", "dlq": "events-dlq"} if poison else {})
                    | (
                        {"consolidate": {"min_age": "0s", "target_bytes": "1MiB"}}
                        if merging
                        else {}
                    )
                ],
            }
        )
    )
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[KafkaError] = []
    sent = [0]
    stop = threading.Event()

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(err)
            return
        key = msg.key()
        assert key is not None
        acked[key] = (msg.partition(), msg.offset())

    def produce() -> None:
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "reconnect.backoff.max.ms": 200,
            }
        )
        i = 0
        while not stop.is_set() and i < 2_000_000:  # bounded: about 20 s at most here
            try:
                producer.produce(
                    "events", key=b"k%d" % i, value=value(i, poison), on_delivery=report
                )
                i += 1
                sent[0] = i
            except BufferError:
                producer.poll(0.05)
                continue
            if i % 200 == 0:
                producer.poll(0)
                time.sleep(0.002)  # a sustained rate, not a flood of the local queue
        assert producer.flush(120) == 0, "records still unacknowledged after 120 s"

    process = serve_process(config)
    wait_listening(port)
    thread = threading.Thread(target=produce, name="producer")
    thread.start()
    kills = scale(3, 10)
    recoveries: list[float] = []
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(0.8, 2.0))
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            started = time.monotonic()
            process = serve_process(config)
            wait_listening(port)
            recoveries.append(time.monotonic() - started)
        time.sleep(1.0)
        if merging:
            # The kills come every 1-2 s, as often as the consolidation passes: let the last
            # serve merge (the producer goes on meanwhile), so that a merge is always part
            # of what is checked.
            deadline = time.monotonic() + 60
            while not _merged_segments(data_dir) and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        stop.set()
        thread.join(180)
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
    assert not thread.is_alive()
    with Store.open(data_dir) as store:
        places = stored_keys(store, "events", dead_letters=False)
        merged = [s for s in store.manifest.segments("events") if "-" in Path(s.path).name]
        if poison:
            for key, found in stored_keys(store, "events-dlq", dead_letters=True).items():
                places.setdefault(key, []).extend(found)
    stored = Counter({key: len(found) for key, found in places.items()})
    lost = [key for key in acked if stored[key] == 0]
    moved = [key for key, place in acked.items() if stored[key] and places[key][0] != place]
    result = Audit(
        produced=sent[0],
        expected=len(acked),
        landed=sum(1 for key in acked if stored[key]),
        lost=len(lost),
        duplicated=sum(n - 1 for n in stored.values() if n > 1),
        unexpected=len(moved),
        missing_sample=[],
    )
    reliability.record(
        "kill -9 during produce"
        + (" with poison" if poison else "")
        + (", durability: segment" if durability == "segment" else "")
        + (", consolidating every second" if merging else ""),
        f"serve killed {kills} times while an idempotent acks=all producer writes to its "
        f"Kafka API (3 partitions; acks=all from the {durability})"
        + (
            f"; every {POISON_EVERY}th record is not JSON and goes to a dead-letter topic"
            if poison
            else ""
        )
        + ("; segments merged as soon as sealed, a pass every second" if merging else ""),
        result,
        recover_s=max(recoveries),
        unacknowledged_stored=sum(1 for key in stored if key not in acked),
        delivery_errors=len(failed),
    )
    assert failed == [], failed[:5]
    assert result.exact, (lost[:5], moved[:5], result)
    assert len(acked) > 1000, "too little was produced for the test to mean anything"
    if merging:  # a consolidated segment is named by its span: first-end
        assert merged, "nothing was consolidated for the test to mean anything"
    if poison:
        letters = sum(1 for key in acked if int(key[1:]) % POISON_EVERY == 0)
        assert letters > 10, "too few poison records were produced to mean anything"
