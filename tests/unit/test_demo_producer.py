"""`plateau demo-producer`'s arguments (producing is tested against the real broker in
tests/integration/test_demo_producer.py)."""

from __future__ import annotations

import argparse

import pytest

from bridge.cli import build_parser
from bridge.cli import demo as demo_cli


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
