"""What every fault test ends with: an audit of the store against what was produced, and
one row of the reliability report (docs/reliability.md) with the outcome.

`PLATEAU_RELIABILITY=full` runs the long forms (24 kills, a 10-minute soak); otherwise the
suite runs the shortened forms CI can afford. Rows are written to a JSON file at the end of
the session (`PLATEAU_RELIABILITY_RESULTS`, default .cache/reliability/last.json), from
which `python -m tests.reliability.report` renders the report.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from plateau_core import Store

FULL = os.environ.get("PLATEAU_RELIABILITY", "short") == "full"


def scale(short: int, full: int) -> int:
    """`full` in the documented long run, `short` in CI."""
    return full if FULL else short


@dataclass(frozen=True)
class Audit:
    """The store's rows of a topic compared with the offsets that should be there."""

    produced: int
    expected: int
    landed: int
    lost: int
    duplicated: int
    unexpected: int
    missing_sample: list[tuple[int, int]] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.unexpected == 0


def audit(
    data_dir: Path,
    topic: str,
    expected: Mapping[int, Iterable[int]],
    *,
    produced: int | None = None,
    manifest_url: str | None = None,
) -> Audit:
    """Compare the (partition, offset) pairs stored for `topic` with `expected`.

    `expected` maps each partition to the offsets that must be stored exactly once (a range
    for "everything produced", or a set where records are legitimately excluded).
    `produced` is what was written to Kafka, when it differs from what is expected.
    """
    want = {(p, o) for p, offsets in expected.items() for o in offsets}
    seen: Counter[tuple[int, int]] = Counter()
    with Store.open(data_dir, manifest_url=manifest_url) as store:
        for span in store.spans(topic):
            table = store.read(topic, partitions=[span.partition], columns=["offset"]).to_table()
            seen.update((span.partition, o) for o in _offsets(table))
    lost = sorted(want - seen.keys())
    return Audit(
        produced=len(want) if produced is None else produced,
        expected=len(want),
        landed=sum(n for key, n in seen.items() if key in want),
        lost=len(lost),
        duplicated=sum(n - 1 for n in seen.values() if n > 1),
        unexpected=sum(n for key, n in seen.items() if key not in want),
        missing_sample=lost[:10],
    )


def _offsets(table: pa.Table) -> list[int]:
    return [int(o) for o in table.column("offset").to_pylist()]


@dataclass
class Row:
    """One line of the report."""

    scenario: str
    action: str
    produced: int
    landed: int
    lost: int
    duplicated: int
    recover_s: float | None
    outcome: str
    test: str
    mode: str = "full" if FULL else "short"
    details: dict[str, object] = field(default_factory=dict)


class Recorder:
    """Collects the session's rows; a test records its row before asserting on it, so a
    failure is reported as such rather than missing from the report."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.test = ""

    def record(
        self,
        scenario: str,
        action: str,
        result: Audit,
        *,
        recover_s: float | None = None,
        outcome: str | None = None,
        **details: object,
    ) -> Row:
        row = Row(
            scenario=scenario,
            action=action,
            produced=result.produced,
            landed=result.landed,
            lost=result.lost,
            duplicated=result.duplicated,
            recover_s=None if recover_s is None else round(recover_s, 2),
            outcome=outcome or ("exactly once" if result.exact else "FAILED"),
            test=self.test,
            details={"expected": result.expected, "unexpected": result.unexpected, **details},
        )
        self.rows.append(row)
        return row

    def check(
        self,
        scenario: str,
        action: str,
        data_dir: Path,
        topic: str,
        expected: Mapping[int, Iterable[int]],
        *,
        produced: int | None = None,
        recover_s: float | None = None,
        outcome: str | None = None,
        manifest_url: str | None = None,
        **details: object,
    ) -> Audit:
        """Audit the store, record the row, and fail the test unless it is exact."""
        result = audit(data_dir, topic, expected, produced=produced, manifest_url=manifest_url)
        self.record(
            scenario,
            action,
            result,
            recover_s=recover_s,
            outcome=outcome if result.exact else None,
            **details,
        )
        assert result.exact, (
            f"{scenario}: lost {result.lost} (first {result.missing_sample}), duplicated "
            f"{result.duplicated}, unexpected {result.unexpected}"
        )
        return result

    def as_json(self) -> list[dict[str, object]]:
        return [asdict(row) for row in self.rows]


def every_offset(
    ends: Mapping[int, int], starts: Mapping[int, int] | None = None
) -> dict[int, range]:
    """Every offset below each partition's end offset (from its start, 0 by default)."""
    return {p: range((starts or {}).get(p, 0), end) for p, end in ends.items()}
