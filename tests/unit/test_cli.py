"""The `plateau` command line's own options, before any command runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bridge.cli import build_parser, main
from bridge.config import load_config
from bridge.errors import ConfigError


@pytest.mark.parametrize(("given", "kept"), [("debug", "DEBUG"), ("Warning", "WARNING")])
def test_log_level_takes_any_case(given: str, kept: str) -> None:
    args = build_parser().parse_args(["--log-level", given, "kafka", "status"])
    assert args.log_level == kept


def test_version_is_the_release_pyproject_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert capsys.readouterr().out == f"plateau {pyproject['project']['version']}\n"


def test_an_unknown_log_level_is_a_usage_error_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--log-level", "loud", "kafka", "status"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "--log-level" in err
    assert "DEBUG, INFO, WARNING or ERROR" in err
    assert "'loud'" in err
    assert "Traceback" not in err


def test_a_replicate_interval_that_is_not_a_duration_says_what_one_looks_like(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["replicate", "-c", "x.yaml", "--interval", "often"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "argument --interval: expected a duration like 250ms, 10s, 5m or 7d" in err
    assert "invalid" not in err  # argparse's own wording for a type it could not apply


@pytest.mark.parametrize("command", ["check", "status"])
def test_a_timeout_that_is_not_a_duration_says_what_one_looks_like(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([command, "-c", "x.yaml", "--timeout", "soon"])
    assert stopped.value.code == 2
    assert "argument --timeout: expected a duration like" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["check", "status"])
def test_a_timeout_of_zero_is_refused_before_anything_is_asked(
    command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([command, "-c", str(tmp_path / "none.yaml"), "--timeout", "0s"])
    assert stopped.value.code == 2
    assert "argument --timeout: must be more than 0s" in capsys.readouterr().err


def test_status_waits_for_kafka_as_long_as_told(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "plateau.yaml"
    config.write_text(
        "kafka: {bootstrap_servers: '127.0.0.1:1'}\n"
        f"storage: {{data_dir: {tmp_path / 'data'}}}\ntopics: [{{source: t}}]\n"
    )
    assert main(["status", "-c", str(config), "--json", "--timeout", "300ms"]) == 1
    assert "Kafka at 127.0.0.1:1 did not answer within 0.3s" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate", "0"], "argument --rate: must be at least 1"),
        (["--rate", "-5"], "argument --rate: must be at least 1"),
        (["--partitions", "0"], "argument --partitions: must be at least 1"),
        (["--seconds", "0"], "argument --seconds: must be a finite number above 0"),
        (["--seconds", "inf"], "argument --seconds: must be a finite number above 0"),
    ],
)
def test_demo_refuses_counts_it_cannot_produce(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["demo", *argv])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_a_replicate_interval_of_zero_is_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without a pause, replicate started a run as soon as the last one ended, over and over
    (about a thousand runs a second of an idle store)."""
    assert main(["replicate", "-c", str(tmp_path / "none.yaml"), "--interval", "0s"]) == 2
    assert "--interval must be more than 0s" in capsys.readouterr().err


def test_a_replication_interval_of_zero_in_the_config_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "plateau.yaml"
    config.write_text(
        f"storage: {{data_dir: {tmp_path / 'data'}}}\nreplication: {{interval: 0s}}\n"
    )
    with pytest.raises(ConfigError, match=r"replication\.interval"):
        load_config(config)
