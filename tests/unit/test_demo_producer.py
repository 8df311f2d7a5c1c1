"""`plateau demo-producer`'s arguments (producing is tested against the real broker in
tests/integration/test_demo_producer.py)."""

from __future__ import annotations

import argparse
import socket

import pytest
from structlog.testing import capture_logs

from bridge.cli import build_parser
from bridge.cli import demo as demo_cli
from bridge.demo.producer import Record, produce
from bridge.errors import BridgeError


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


def test_librdkafka_lines_become_debug_events_and_the_failure_is_raised(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """What the demo (and `make run`) shows is plateau's own output: librdkafka's lines (a
    refused connection here; a fresh broker's "coordinator load in progress" in the demo)
    are debug events, and what matters comes back as the raised failure."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with capture_logs() as events, pytest.raises(BridgeError, match="1 records to 'demo'"):
        produce(f"127.0.0.1:{port}", "demo", [Record(b"v")], flush_timeout_s=1.5)
    # Only this producer's lines: one another test left alive may print its own.
    assert f"127.0.0.1:{port}" not in capfd.readouterr().err
    lines = [e for e in events if e["event"] == "librdkafka_log"]
    assert lines and all(e["log_level"] == "debug" for e in lines)
    assert any("Connection refused" in e["message"] for e in lines)
