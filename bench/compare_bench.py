"""plateau side by side with what a user would pick instead, on one topic, in one run.

`make bench` runs this. It starts a local Apache Kafka broker, pre-fills an 8-partition topic
with `--records` records of 128 random bytes and a second one with `--json-records` JSON
events of about 1 KiB, and measures each system reading a topic from offset 0 until it is
caught up and what it wrote is durable, each in its own subprocess (wall, CPU seconds of the
process tree, peak RSS of the tree; bench/ingest_bench.py has the machinery):

- plateau serve, 1 and 2 workers (raw format; done when the manifest holds every record in
  sealed segments; the JSON topic also with `format: json`, decoded into columns);
- Spark Structured Streaming, `readStream.format("kafka")` into a Parquet sink with
  `trigger(availableNow=True)` (done when the query ends: the batch is committed);
- quixstreams with its Parquet file sink (done when every record is consumed and the sink's
  last checkpoint committed);
- the ceilings: a plain confluent-kafka consumer touching value, offset and timestamp (with
  the fetch setting plateau uses), and kcat to /dev/null.

Then freshness at a steady produce rate (bench/freshness_bench.py) for plateau and Spark,
and charts (bench/charts.py). Results: bench/results/compare-<timestamp>.json and
docs/img/bench-*.png.

    make bench
    .venv/bin/python bench/compare_bench.py --records 500000 --json-records 100000 --quick
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pyspark
from charts import write_charts
from freshness_bench import run_freshness
from ingest_bench import (
    BENCH_DIR,
    PYTHON,
    RESULTS_DIR,
    BenchError,
    CaseResult,
    Context,
    Tier,
    Topic,
    _result,
    _show,
    broker,
    case_kcat,
    case_python,
    machine_info,
    portable,
    prefill,
    raw_values,
    require_kcat,
    run_reporting,
    run_serve,
    summarise,
)
from spark_kafka_jars import connector_version

from bridge.logs import configure_logging
from plateau_core.cache import default_cache_dir

PEERS = {"spark-ss": BENCH_DIR / "peer_spark.py", "quixstreams": BENCH_DIR / "peer_quix.py"}
# LocalFileSink with ParquetFormat is in quixstreams 3.23 and later.
QUIX_REQUIREMENT = "quixstreams[parquet]>=3.23,<4"
# plateau's worker sets this librdkafka property (bridge/consume/worker.py); the Python ceiling gets
# the same, or the comparison would measure librdkafka's default back-off instead.
TUNED = Tier("tuned", {"fetch.queue.backoff.ms": "10"})
_SERVICES = ("checkout", "payments", "search", "auth", "inventory", "shipping", "catalog")
_LEVELS = ("info",) * 6 + ("warn", "error", "debug")


def json_values(records: int, size: int = 1024, seed: int = 13) -> Iterator[bytes]:
    """JSON log events of `size` bytes each: a few typed fields and a text payload."""
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz      "
    for i in range(records):
        head = (
            f'{{"seq":{i},"ts":{1_764_000_000_000 + i},"service":"{rng.choice(_SERVICES)}",'
            f'"level":"{rng.choice(_LEVELS)}","latency_ms":{rng.random() * 200:.2f},'
            f'"host":"web-{rng.randrange(64):02d}","message":"'
        )
        pad = size - len(head) - 2
        yield (head + "".join(rng.choices(alphabet, k=pad)) + '"}').encode()


def quix_python() -> Path:
    """The interpreter of quixstreams' own virtualenv, made on first use.

    quixstreams pins confluent-kafka below the release plateau depends on; installed beside
    plateau it would change the librdkafka that plateau and the ceiling are measured with.
    """
    venv = default_cache_dir() / "bench" / "venv-quixstreams"
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if not marker.exists() or marker.read_text() != QUIX_REQUIREMENT:
        print(f"installing {QUIX_REQUIREMENT} into {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, QUIX_REQUIREMENT], check=True)
        marker.write_text(QUIX_REQUIREMENT)
    return python


def case_peer(ctx: Context, topic: Topic, name: str) -> CaseResult:
    out = ctx.work / f"{name}-{topic.name}-out"
    shutil.rmtree(out, ignore_errors=True)
    python = quix_python() if name == "quixstreams" else Path(PYTHON)
    argv = [str(python), str(PEERS[name]), "--bootstrap", ctx.bootstrap, "--topic", topic.name]
    argv += ["--expected", str(topic.messages), "--out", str(out)]
    if name == "quixstreams":
        argv += ["--broker-pid", str(ctx.broker_pid or 0)]
    run, report = run_reporting(ctx, f"{name}-{topic.name}", argv, topic.messages)
    first = report.get("first_record")
    result = _result(
        name,
        topic,
        run,
        report["done"] - run.started,
        None if first is None else first - run.started,
    )
    result.cpu_s_at_done = result.cpu_s  # it exits when done
    result.cores_used = round(result.cpu_s / result.wall_s, 2)
    result.extra.update(
        {k: v for k, v in report.items() if k not in ("records", "done", "first_record")}
    )
    result.extra["output_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    shutil.rmtree(out, ignore_errors=True)
    return result


def run_workload(ctx: Context, topic: Topic, formats: list[str], repeat: int) -> list[CaseResult]:
    cases: list[CaseResult] = []
    for _ in range(repeat):
        cases.append(_show(case_kcat(ctx, topic)))
        cases.append(_show(case_python(ctx, topic, TUNED)))
        for fmt in formats:
            suffix = "" if fmt == "raw" else f"-{fmt}"
            for workers in (1, 2):
                name = f"plateau-{workers}w{suffix}"
                cases.append(_show(run_serve(ctx, topic, fmt, workers, name, Tier("default", {}))))
        for peer in PEERS:
            cases.append(_show(case_peer(ctx, topic, peer)))
    return cases


def compare(summary: dict[str, Any]) -> dict[str, Any]:
    """Each system's records/s and peak RSS as a ratio to plateau with 1 worker, and the
    targets: plateau ahead of every peer; 1 worker within 0.8 of the Python ceiling."""
    cases = summary["cases"]
    plateau = cases["plateau-1w"]
    python = cases.get(TUNED.case("python"))
    best_plateau = max(
        cases[c]["records_per_s"] for c in cases if c.startswith("plateau-") and "json" not in c
    )
    ratios = {
        name: {
            "records_per_s_vs_plateau_1w": round(
                info["records_per_s"] / plateau["records_per_s"], 3
            ),
            "peak_rss_vs_plateau_1w": round(
                info["peak_tree_rss_mb"] / plateau["peak_tree_rss_mb"], 3
            ),
        }
        for name, info in cases.items()
    }
    peers = {name: cases[name]["records_per_s"] for name in PEERS if name in cases}
    targets = {
        "plateau ahead of every peer on records/s": {
            "met": all(best_plateau > rate for rate in peers.values()),
            "plateau_best": best_plateau,
            "peers": peers,
        },
    }
    if python is not None:
        value = round(plateau["records_per_s"] / python["records_per_s"], 3)
        targets["plateau 1 worker / Python ceiling >= 0.8"] = {"ratio": value, "met": value >= 0.8}
    return {"vs_plateau_1w": ratios, "targets": targets}


def versions(workloads: dict[str, Any]) -> dict[str, Any]:
    """Versions of what was measured; the peers report their own."""
    found: dict[str, Any] = {
        "pyspark": pyspark.__version__,
        "spark_sql_kafka": connector_version(),
        "matplotlib": metadata.version("matplotlib"),
    }
    for workload in workloads.values():
        for run in workload["runs"]:
            if run["case"] in PEERS:
                found[run["case"]] = run["extra"].get("versions")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000, help="128-byte records")
    parser.add_argument("--json-records", type=int, default=1_000_000, help="1 KiB JSON events")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each case (median)")
    parser.add_argument("--max-age", default="1s", help="plateau's roll max_age")
    parser.add_argument("--fresh-rate", type=int, default=50_000, help="records/s; 0: skip")
    parser.add_argument("--fresh-seconds", type=float, default=30.0)
    parser.add_argument("--trigger-seconds", type=float, default=1.0, help="Spark's trigger")
    parser.add_argument("--timeout", type=float, default=900.0, help="per case, seconds")
    parser.add_argument("--quick", action="store_true", help="no freshness, no charts")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temp folder")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        require_kcat()
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="plateau-compare-", dir=args.work_dir) as tmp:
            work = Path(tmp)
            payload = run_all(args, work, stamp)
            text = portable(json.dumps(payload, indent=2), work)
    except BenchError as exc:
        print(f"compare_bench: {exc}", file=sys.stderr)
        return 2
    path = RESULTS_DIR / f"compare-{stamp}.json"
    path.write_text(text + "\n")
    print(f"results: {path.relative_to(BENCH_DIR.parent)}")
    if not args.quick:
        for chart in write_charts(json.loads(text)):
            print(f"chart: {chart.relative_to(BENCH_DIR.parent)}")
    return 0


def run_all(args: argparse.Namespace, work: Path, stamp: str) -> dict[str, Any]:
    with broker(work, "1g") as kafka:
        ctx = Context(
            bootstrap=kafka.bootstrap_servers,
            broker_pid=kafka.pid,
            work=work,
            results_dir=RESULTS_DIR,
            stamp=stamp,
            max_age=args.max_age,
            timeout_s=args.timeout,
            stage_records=0,
        )
        machine = machine_info(kafka.settings.kafka_version, None)
        workloads: dict[str, Any] = {}
        specs = [
            ("raw128", args.records, lambda n: raw_values(n, 128), ["raw"]),
            ("json1k", args.json_records, json_values, ["raw", "json"]),
        ]
        for name, records, values, formats in specs:
            if not records:
                continue
            print(f"{name}: pre-filling {records:,} records ...", flush=True)
            topic = prefill(
                ctx.bootstrap, f"{name}-{uuid.uuid4().hex[:6]}", args.partitions, values(records), 1
            )
            cases = run_workload(ctx, topic, formats, args.repeat)
            summary = summarise(cases, [TUNED])
            workloads[name] = {
                "topic": asdict(topic),
                "summary": summary,
                "comparison": compare(summary),
                "runs": [asdict(c) for c in cases],
            }
        machine["versions"] = versions(workloads)
        freshness = None
        if args.fresh_rate and not args.quick:
            freshness = run_freshness(
                ctx.bootstrap,
                work,
                rate=args.fresh_rate,
                seconds=args.fresh_seconds,
                warmup_s=3.0,
                max_age=args.max_age,
                trigger_s=args.trigger_seconds,
                partitions=args.partitions,
            )
    return {
        "benchmark": "compare",
        "timestamp": stamp,
        "machine": machine,
        "settings": {
            "records": args.records,
            "json_records": args.json_records,
            "partitions": args.partitions,
            "repeat": args.repeat,
            "roll_max_age": args.max_age,
            "fresh_rate": args.fresh_rate,
            "fresh_seconds": args.fresh_seconds,
            "spark_trigger_seconds": args.trigger_seconds,
            "python_ceiling_properties": TUNED.properties,
        },
        "workloads": workloads,
        "freshness": freshness,
    }


if __name__ == "__main__":
    sys.exit(main())
