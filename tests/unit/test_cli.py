"""The `plateau` command line's own options, before any command runs."""

from __future__ import annotations

import pytest

from bridge.cli import build_parser, main


@pytest.mark.parametrize(("given", "kept"), [("debug", "DEBUG"), ("Warning", "WARNING")])
def test_log_level_takes_any_case(given: str, kept: str) -> None:
    args = build_parser().parse_args(["--log-level", given, "kafka", "status"])
    assert args.log_level == kept


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
