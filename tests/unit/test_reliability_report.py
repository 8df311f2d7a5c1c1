"""The reliability report is rendered from the suite's results, failures included, and the
audit behind each row counts lost and unexpected offsets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plateau_core import Store, WriterPolicy
from tests.reliability.report import render
from tests.reliability.support import audit
from tests.support import batch


def _document(**row: Any) -> dict[str, Any]:
    base = {
        "scenario": "kill -9 | during seals",
        "action": "killed 8 times",
        "produced": 1000,
        "landed": 998,
        "lost": 2,
        "duplicated": 0,
        "recover_s": 3.25,
        "outcome": "FAILED",
        "test": "tests/reliability/test_crashes.py::t",
        "mode": "short",
        "details": {"kills": 8},
    }
    return {
        "mode": "short",
        "started_at": "2026-11-23T00:00:00Z",
        "seconds": 61.0,
        "exit_status": 1,
        "machine": {"cpus": 2, "python": "3.11.7"},
        "rows": [{**base, **row}],
    }


def test_rows_become_table_lines_and_failures_are_counted() -> None:
    text = render(_document())
    assert "| kill -9 \\| during seals | killed 8 times | 1,000 | 998 | 2 | 0 | 3.2 s |" in text
    assert "1 scenarios, 1 failed" in text
    assert "kills=8" in text
    assert "## Results of the last short run" in text


def test_audit_counts_lost_and_unexpected_offsets(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        writer = store.writer(WriterPolicy(fsync=False))
        writer.acquire("t", 0)
        writer.append("t", 0, batch(range(0, 10)))
        writer.close()
    exact = audit(tmp_path, "t", {0: range(10)})
    assert exact.exact and exact.landed == 10
    missing = audit(tmp_path, "t", {0: range(12)})
    assert (missing.lost, missing.missing_sample) == (2, [(0, 10), (0, 11)])
    extra = audit(tmp_path, "t", {0: range(5)}, produced=10)
    assert (extra.unexpected, extra.produced, extra.exact) == (5, 10, False)
