"""Render docs/reliability.md from the suite's own results file.

    python -m tests.reliability.report [results.json] [--out docs/reliability.md]

The table is the rows the tests recorded, in the order they ran; nothing is typed in by hand.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_RESULTS = REPO / "docs" / "reliability-results.json"
DEFAULT_OUT = REPO / "docs" / "reliability.md"
INTRO = REPO / "tests" / "reliability" / "report_intro.md"


def render(document: dict[str, Any]) -> str:
    rows = document["rows"]
    lines = [INTRO.read_text().rstrip(), ""]
    lines += [
        f"## Results of the last {document['mode']} run",
        "",
        f"Run started {document['started_at']}, {document['seconds']:.0f} s in all, "
        f"{document['machine']['cpus']} CPUs, Python {document['machine']['python']}; "
        f"pytest exit status {document['exit_status']}; {len(rows)} scenarios, "
        f"{sum(1 for r in rows if r['outcome'] == 'FAILED')} failed.",
        "",
        "| Scenario | What was done | Produced | Landed | Lost | Duplicated "
        "| Time to recover | Outcome |",
        "|---|---|--:|--:|--:|--:|--:|---|",
    ]
    for row in rows:
        recover = "" if row["recover_s"] is None else f"{row['recover_s']:.1f} s"
        lines.append(
            f"| {_cell(row['scenario'])} | {_cell(row['action'])} | {row['produced']:,} "
            f"| {row['landed']:,} | {row['lost']:,} | {row['duplicated']:,} | {recover} "
            f"| {_cell(row['outcome'])} |"
        )
    lines += ["", "### Details", ""]
    for row in rows:
        extra = ", ".join(f"{k}={_value(v)}" for k, v in row["details"].items())
        lines.append(f"- **{_cell(row['scenario'])}** (`{row['test']}`): {extra}")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    document = json.loads(args.results.read_text())
    args.out.write_text(render(document))
    print(f"wrote {args.out} from {args.results} ({len(document['rows'])} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
