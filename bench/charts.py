"""PNG charts of a bench/compare_bench.py results file, for docs/benchmarks.md.

    .venv/bin/python bench/charts.py bench/results/compare-<timestamp>.json

Writes docs/img/bench-throughput.png (records/s per system and workload) and
docs/img/bench-memory.png (peak RSS of each system's process tree), and, when the run
measured it, docs/img/bench-freshness.png (produce-to-visible latency percentiles).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on benchmark machines
import matplotlib.pyplot as plt

IMG_DIR = Path(__file__).resolve().parents[1] / "docs" / "img"

# Order and labels of the systems in every chart.
SYSTEMS = [
    ("kcat", "kcat → /dev/null (ceiling)"),
    ("python-tuned", "Python consumer (ceiling)"),
    ("plateau-1w", "plateau serve, 1 worker"),
    ("plateau-2w", "plateau serve, 2 workers"),
    ("plateau-1w-json", "plateau, 1 worker, JSON decoded"),
    ("plateau-2w-json", "plateau, 2 workers, JSON decoded"),
    ("spark-ss", "Spark Structured Streaming → Parquet"),
    ("quixstreams", "quixstreams → Parquet"),
]
WORKLOADS = [("raw128", "128-byte values"), ("json1k", "1 KiB JSON events")]
COLOURS = {"plateau": "#1f6feb", "ceiling": "#9aa4ad", "peer": "#d97706"}


def _colour(system: str) -> str:
    if system.startswith("plateau"):
        return COLOURS["plateau"]
    if system in ("kcat", "python-tuned"):
        return COLOURS["ceiling"]
    return COLOURS["peer"]


def _bars(
    results: dict[str, Any], metric: str, scale: float, xlabel: str, title: str, path: Path
) -> Path:
    workloads = [(k, label) for k, label in WORKLOADS if k in results["workloads"]]
    fig, axes = plt.subplots(
        len(workloads), 1, figsize=(9, 2.6 + 2.2 * len(workloads)), squeeze=False
    )
    for ax, (key, label) in zip(axes[:, 0], workloads, strict=True):
        cases = results["workloads"][key]["summary"]["cases"]
        shown = [(s, name) for s, name in SYSTEMS if s in cases]
        values = [cases[s][metric] / scale for s, _ in shown]
        ax.barh([name for _, name in shown], values, color=[_colour(s) for s, _ in shown])
        for y, value in enumerate(values):
            ax.text(value, y, f" {value:,.0f}" if value >= 10 else f" {value:.2f}", va="center")
        ax.invert_yaxis()
        ax.set_title(f"{label}: {results['workloads'][key]['topic']['messages']:,} records")
        ax.set_xlabel(xlabel)
        ax.set_xlim(0, max(values) * 1.2)
    machine = results["machine"]
    fig.suptitle(
        f"{title} — {machine['nproc']} cores, {machine['ram_bytes'] / 2**30:.0f} GiB, "
        f"Kafka {machine['kafka']} on the same machine ({results['timestamp']})",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _freshness(results: dict[str, Any], path: Path) -> Path:
    fresh = results["freshness"]
    fig, ax = plt.subplots(figsize=(8, 3))
    systems = list(fresh)
    for i, quantile in enumerate(("p50_s", "p90_s", "p99_s")):
        ax.bar(
            [j + i * 0.25 for j in range(len(systems))],
            [fresh[s][quantile] for s in systems],
            width=0.25,
            label=quantile.removesuffix("_s"),
        )
    ax.set_xticks(
        [j + 0.25 for j in range(len(systems))],
        [f"{s}\n({fresh[s]['setting']})" for s in systems],
    )
    ax.set_ylabel("produce → visible in a query (s)")
    ax.set_title(f"Freshness at {results['settings']['fresh_rate']:,} records/s", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_charts(results: dict[str, Any], directory: Path = IMG_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = [
        _bars(
            results,
            "records_per_s",
            1.0,
            "records/s (from offset 0 to caught up and durable)",
            "Ingest throughput",
            directory / "bench-throughput.png",
        ),
        _bars(
            results,
            "peak_tree_rss_mb",
            1.0,
            "peak RSS of the process tree (MB)",
            "Memory",
            directory / "bench-memory.png",
        ),
    ]
    if results.get("freshness"):
        written.append(_freshness(results, directory / "bench-freshness.png"))
    return written


if __name__ == "__main__":
    for chart in write_charts(json.loads(Path(sys.argv[1]).read_text())):
        print(chart)
