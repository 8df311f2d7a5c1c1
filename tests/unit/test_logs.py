"""structlog set-up (bridge.logs): how events reach stderr."""

from __future__ import annotations

import json
import sys

import pytest
import structlog

from bridge.logs import configure_logging


class _Recording:
    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_each_event_is_one_write_of_a_whole_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes share serve's stderr, which writes through: an event written as two
    writes (print's text, then its newline) ran into another process's on the same line,
    and the JSON lines no longer parsed."""
    stderr = _Recording()
    monkeypatch.setattr(sys, "stderr", stderr)
    configure_logging("INFO", "json")
    structlog.get_logger("t").info("segment_sealed", topic="t", partition=0, end_offset=5)
    assert len(stderr.writes) == 1
    line = stderr.writes[0]
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line)["event"] == "segment_sealed"
