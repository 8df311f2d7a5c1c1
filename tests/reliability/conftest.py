"""Tests under tests/reliability are marked `reliability` (the recorder is in tests/conftest.py,
so a fault test anywhere can add its row)."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.reliability)
