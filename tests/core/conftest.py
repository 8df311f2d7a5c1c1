from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from plateau_core import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "data")
    try:
        yield opened
    finally:
        opened.close()
