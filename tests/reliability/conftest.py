"""The reliability suite's recorder: one per session, written out when the session ends."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.support import FULL, Recorder

REPO = Path(__file__).resolve().parents[2]
_RECORDER = Recorder()
_STARTED = time.time()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.reliability)


@pytest.fixture
def reliability(request: pytest.FixtureRequest) -> Iterator[Recorder]:
    _RECORDER.test = request.node.nodeid
    yield _RECORDER


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _RECORDER.rows:
        return
    default = REPO / ".cache" / "reliability" / "last.json"
    target = Path(os.environ.get("PLATEAU_RELIABILITY_RESULTS", default))
    target.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "mode": "full" if FULL else "short",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_STARTED)),
        "seconds": round(time.time() - _STARTED, 1),
        "exit_status": int(exitstatus),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rows": _RECORDER.as_json(),
    }
    target.write_text(json.dumps(document, indent=2) + "\n")
