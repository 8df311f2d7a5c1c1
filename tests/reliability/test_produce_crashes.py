"""kill -9 of `plateau serve` while an idempotent producer (librdkafka, acks=all) writes to
its Kafka API, repeated: every acknowledged record is stored once, at the offset its
acknowledgement named, and no record is stored twice."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import yaml
from confluent_kafka import KafkaError, Message, Producer

from plateau_core import Store
from tests.bridge_support import free_port, serve_process
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


def test_kill_9_during_idempotent_produce(tmp_path: Path, reliability: Recorder) -> None:
    rng = random.Random(int(os.environ.get("PLATEAU_CRASH_SEED", "7")))
    port = free_port()
    data_dir = tmp_path / "data"
    config = tmp_path / "plateau.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"data_dir": str(data_dir)},
                "kafka_api": {"listen": f"127.0.0.1:{port}"},
                "metrics": {"listen": "127.0.0.1:0"},
                "topics": [{"name": "events", "partitions": 3}],
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
                producer.produce("events", key=b"k%d" % i, value=b"v%d" % i, on_delivery=report)
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
    finally:
        stop.set()
        thread.join(180)
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
    assert not thread.is_alive()
    stored: Counter[bytes] = Counter()
    where: dict[bytes, tuple[int, int]] = {}
    with Store.open(data_dir) as store:
        for partition in range(3):
            table = store.read("events", partitions=[partition], columns=["offset", "key"])
            for row in table.to_table().to_pylist():
                stored[row["key"]] += 1
                where[row["key"]] = (partition, row["offset"])
    lost = [key for key in acked if stored[key] == 0]
    moved = [key for key, place in acked.items() if stored[key] and where[key] != place]
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
        "kill -9 during produce",
        f"serve killed {kills} times while an idempotent acks=all producer writes to its "
        "Kafka API (3 partitions)",
        result,
        recover_s=max(recoveries),
        unacknowledged_stored=sum(1 for key in stored if key not in acked),
        delivery_errors=len(failed),
    )
    assert failed == [], failed[:5]
    assert result.exact, (lost[:5], moved[:5], result)
    assert len(acked) > 1000, "too little was produced for the test to mean anything"
