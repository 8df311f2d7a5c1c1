"""`plateau demo-producer` without a broker: its arguments, chunks and stop."""

from __future__ import annotations

import argparse
import json
import os
import signal
from collections.abc import Iterable

import pytest

from bridge.cli import build_parser, main
from bridge.cli import demo as demo_cli
from bridge.demo import events
from bridge.demo.producer import Record


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["demo-producer", *argv])


def test_defaults_and_handler() -> None:
    args = parse("--bootstrap-servers", "kafka:9092", "--topic", "events")
    assert vars(args) | {"handler": None} == {
        "log_level": "INFO",
        "log_format": "auto",
        "command": "demo-producer",
        "bootstrap_servers": "kafka:9092",
        "topic": "events",
        "partitions": 4,
        "rate": 1000,
        "seconds": None,
        "handler": None,
    }
    assert args.handler is demo_cli._demo_producer
    args = parse(
        "--bootstrap-servers=a:1,[::1]:2",
        "--topic=t",
        "--partitions=2",
        "--rate=50",
        "--seconds=1.5",
    )
    assert (args.partitions, args.rate, args.seconds) == (2, 50, 1.5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topic", "t"], "the following arguments are required: --bootstrap-servers"),
        (["--bootstrap-servers", "k:9092"], "the following arguments are required: --topic"),
        (["--bootstrap-servers", "kafka", "--topic", "t"], "expected host:port"),
        (["--bootstrap-servers", "k:9092,k", "--topic", "t"], "expected host:port"),
        (["--bootstrap-servers", "k:0", "--topic", "t"], "expected host:port"),
        (["--bootstrap-servers", "k:9092", "--topic", "a/b"], "[A-Za-z0-9._-]"),
        (["--bootstrap-servers", "k:9092", "--topic", "t", "--rate", "0"], "at least 1"),
        (["--bootstrap-servers", "k:9092", "--topic", "t", "--rate", "1.5"], "whole number"),
        (["--bootstrap-servers", "k:9092", "--topic", "t", "--partitions", "0"], "at least 1"),
        (["--bootstrap-servers", "k:9092", "--topic", "t", "--seconds", "0"], "above 0"),
        (["--bootstrap-servers", "k:9092", "--topic", "t", "--seconds", "nan"], "above 0"),
        (["--bootstrap-servers", "k:9092", "--topic", "t", "--seconds", "inf"], "finite"),
        (["--bootstrap-servers", "k:9092", "--topic", "t", "--seconds", "x"], "number"),
    ],
)
def test_bad_arguments_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


class FakeKafka:
    """Stands in for create_topic and produce; records what the producer asked for."""

    def __init__(self, stop_after_chunks: int | None = None) -> None:
        self.calls: list[str] = []
        self.chunks: list[list[int]] = []
        self.stop_after_chunks = stop_after_chunks

    def create_topic(self, bootstrap: str, topic: str, partitions: int, **kw: object) -> None:
        self.calls.append(f"create {bootstrap} {topic} {partitions} exist_ok={kw['exist_ok']}")

    def produce(self, bootstrap: str, topic: str, records: Iterable[Record]) -> int:
        self.calls.append(f"produce {bootstrap} {topic}")
        chunk = []
        for record in records:
            assert record.value is not None
            chunk.append(json.loads(record.value)["seq"])
            if len(self.chunks) + 1 == self.stop_after_chunks and len(chunk) == 3:
                # What `docker stop` does to the container's process 1, mid-chunk.
                os.kill(os.getpid(), signal.SIGTERM)
        self.chunks.append(chunk)
        return len(chunk)


@pytest.fixture
def fake_kafka(monkeypatch: pytest.MonkeyPatch) -> FakeKafka:
    fake = FakeKafka()
    monkeypatch.setattr(events, "create_topic", fake.create_topic)
    monkeypatch.setattr(events, "produce", fake.produce)
    monkeypatch.setattr(events, "PRODUCER_CHUNK_S", 0.1)
    return fake


def test_seconds_produce_rate_times_seconds_in_chunks(fake_kafka: FakeKafka) -> None:
    argv = ["--bootstrap-servers", "k:1", "--topic", "t", "--partitions", "3"]
    assert main(["demo-producer", *argv, "--rate", "1000", "--seconds", "0.35"]) == 0
    # The topic comes first, then chunks of 0.1 s of events with one running sequence.
    assert fake_kafka.calls[0] == "create k:1 t 3 exist_ok=True"
    assert set(fake_kafka.calls[1:]) == {"produce k:1 t"}
    assert [len(c) for c in fake_kafka.chunks] == [100, 100, 100, 50]
    assert [seq for chunk in fake_kafka.chunks for seq in chunk] == list(range(350))


@pytest.mark.timeout(30)
def test_sigterm_stops_within_the_chunk_and_restores_handlers(
    fake_kafka: FakeKafka, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_kafka.stop_after_chunks = 2
    before = signal.getsignal(signal.SIGTERM)
    assert main(["demo-producer", "--bootstrap-servers", "k:1", "--topic", "t"]) == 0
    assert [len(c) for c in fake_kafka.chunks] == [100, 3]
    assert signal.getsignal(signal.SIGTERM) is before
    stopped = [json.loads(line) for line in capsys.readouterr().err.splitlines()][-1]
    assert (stopped["event"], stopped["records"], stopped["signalled"]) == (
        "demo_producer_stopped",
        103,
        True,
    )
