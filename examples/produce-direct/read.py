"""Read what landed with plateau_core's Store API: no Spark, no Kafka, any process.

    .venv/bin/python examples/produce-direct/read.py [--data-dir DIR] [--minutes 60]

Records are readable once sealed into a segment: with the example's config, within about a
second of their acknowledgement. The store may be read while `plateau serve` writes it.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from plateau_core import Store

# storage.data_dir of plateau.yaml, which is relative to that file.
DATA_DIR = Path(__file__).resolve().parent / "data"
EVENTS_TOPIC = "app-events"
DLQ_TOPIC = "app-events-dlq"
RAW_TOPIC = "audit-raw"


def rows(store: Store, topic: str, **conditions: Any) -> list[dict[str, Any]]:
    """The rows of every partition of `topic` that pass `conditions` (Store.read's keywords),
    each with its partition number: Store.read's rows have no partition column, so the
    partitions are read one by one."""
    found: list[dict[str, Any]] = []
    for span in store.spans(topic):
        result = store.read(topic, partitions=[span.partition], **conditions)
        found += [{"partition": span.partition, **row} for row in result.to_table().to_pylist()]
    return found


def recent_events(store: Store, since: datetime) -> list[dict[str, Any]]:
    # time_start is inclusive, time_end (left out: up to now) exclusive; segments wholly
    # outside the range are never opened.
    return rows(store, EVENTS_TOPIC, time_start=since)


def errors_since(store: Store, since: datetime) -> list[dict[str, Any]]:
    # `where` keeps rows whose column equals the value (or one of a list of values), and skips
    # segments whose column statistics rule it out.
    return rows(
        store,
        EVENTS_TOPIC,
        time_start=since,
        where={"level": "error"},
        columns=["offset", "timestamp", "key", "service", "request_id", "latency_ms"],
    )


def request(store: Store, request_id: str) -> list[dict[str, Any]]:
    # request_id has a bloom filter per segment (index.bloom in plateau.yaml): only segments
    # that may hold the value are opened.
    return rows(store, EVENTS_TOPIC, where={"request_id": request_id})


def dead_letters(store: Store) -> list[dict[str, Any]]:
    """Records app-events could not decode: their bytes as sent, and why, in the headers."""
    return rows(store, DLQ_TOPIC)


def audit(store: Store) -> list[dict[str, Any]]:
    return rows(store, RAW_TOPIC)


def headers(row: dict[str, Any]) -> dict[str, bytes]:
    return {h["key"]: h["value"] for h in row["headers"] or []}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help="storage.data_dir")
    parser.add_argument("--minutes", type=float, default=60.0, help="how far back to read")
    args = parser.parse_args(argv)
    if not (args.data_dir / "manifest.db").exists():
        print(f"no store in {args.data_dir}: start serve and run produce.py first", file=sys.stderr)
        return 1
    since = datetime.now(UTC) - timedelta(minutes=args.minutes)
    with Store.open(args.data_dir) as store:
        events = recent_events(store, since)
        print(f"{EVENTS_TOPIC}, last {args.minutes:g} minutes: {len(events)} record(s)")
        for row in events:
            print(
                f"  [{row['partition']}] offset {row['offset']} {row['timestamp']:%H:%M:%S} "
                f"{row['service']} {row['level']} {row['request_id']} {row['latency_ms']} ms"
            )
        errors = errors_since(store, since)
        print(f"errors: {', '.join(str(r['request_id']) for r in errors) or 'none'}")
        for row in request(store, "r-2"):
            print(f"request r-2: {row['service']} took {row['latency_ms']} ms")
        for row in dead_letters(store):
            said = headers(row)
            print(
                f"dead letter from {said['plateau.error.topic'].decode()}"
                f"[{said['plateau.error.partition'].decode()}] "
                f"offset {said['plateau.error.offset'].decode()}: {row['value']!r} "
                f"({said['plateau.error.message'].decode()})"
            )
        for row in audit(store):
            print(f"{RAW_TOPIC}: {row['value']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
