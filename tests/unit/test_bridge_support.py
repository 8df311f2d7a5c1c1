"""The test helpers that run `plateau serve`: a failing test says how serve itself ended."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from bridge.serve import serve
from tests.bridge_support import make_config, serving


def test_a_failing_block_reports_the_error_serve_ended_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve fails at once (its data_dir is a file); the block then fails its own way (a
    wait that timed out): the failure also names serve's error."""
    ended = threading.Event()

    def serve_then_say(*args: Any) -> int:
        try:
            return serve(*args)
        finally:
            ended.set()

    monkeypatch.setattr("tests.bridge_support.serve", serve_then_say)
    data_dir = tmp_path / "not-a-directory"
    data_dir.write_text("")
    config = make_config("127.0.0.1:9", data_dir, [{"source": "t"}], group="g")
    with pytest.raises(AssertionError, match="timed out") as raised, serving(config):
        assert ended.wait(30)
        raise AssertionError("timed out")
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "serve ended on its own, before the block ended, raising" in notes, notes
    assert "FileExistsError" in notes, notes


def test_a_failing_block_reports_serve_stopping_cleanly_too(tmp_path: Path) -> None:
    config = make_config("127.0.0.1:9", tmp_path, [{"source": "t"}], group="g")
    with pytest.raises(AssertionError, match="boom") as raised, serving(config):
        raise AssertionError("boom")
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "serve returned 0 after the block ended" in notes, notes
    assert "serve_started" in notes, notes


def test_serve_hanging_after_a_failing_block_does_not_hide_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hang = threading.Event()

    def stuck(*_args: object) -> int:
        hang.wait(30)
        return 0

    monkeypatch.setattr("tests.bridge_support.serve", stuck)
    monkeypatch.setattr("tests.bridge_support.SERVE_STOP_WAIT_S", 0.2)
    config = make_config("127.0.0.1:9", tmp_path, [{"source": "t"}], group="g")
    try:
        with pytest.raises(AssertionError, match="boom") as raised, serving(config):
            raise AssertionError("boom")
    finally:
        hang.set()
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "serve was still running" in notes, notes
