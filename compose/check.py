"""`make compose-check`: bring the compose stack up (with the `direct` profile, whose producer
writes to plateau's Kafka API), check that records reach plateau's store by both ways and
the Parquet replica in MinIO, then take it down again (volumes included).

Needs a Docker engine with Compose v2. The stack runs under its own project name, so a
stack you started yourself is left alone. Exit 0 when both checks pass.

    python compose/check.py [--timeout 300] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

COMPOSE_FILE = Path(__file__).resolve().with_name("docker-compose.yml")
PROJECT = "plateau-check"
CONFIG = "/etc/plateau/compose.yaml"
# What the producer-direct service writes to plateau's Kafka API (config/compose.yaml).
DIRECT_TOPIC = "plateau-direct-events"
# Rows in the replica, read inside the spark service (it has pyarrow and the S3 settings).
COUNT_REPLICA = """
import os, pyarrow.dataset as ds, pyarrow.fs as fs
s3 = fs.S3FileSystem(endpoint_override="http://minio:9000", scheme="http", region="us-east-1",
    access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"])
files = [f.path for f in s3.get_file_info(fs.FileSelector("plateau-replica/plateau",
    recursive=True, allow_not_found=True)) if f.path.endswith(".parquet")]
print(ds.dataset(files, filesystem=s3, format="parquet").count_rows() if files else 0)
"""


class CheckError(Exception):
    """The stack could not be run, or records did not reach where they should."""


def compose(*args: str, capture: bool = True, timeout: float = 900) -> str:
    command = [
        "docker",
        "compose",
        "-f",
        str(COMPOSE_FILE),
        "-p",
        PROJECT,
        "--profile",
        "direct",
        *args,
    ]
    result = subprocess.run(
        command, capture_output=capture, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        detail = (result.stderr or "").strip()[-2000:] if capture else ""
        raise CheckError(f"{' '.join(command[2:])} failed ({result.returncode}): {detail}")
    return result.stdout if capture else ""


def require_docker() -> None:
    if shutil.which("docker") is None:
        raise CheckError("docker is not installed: compose-check needs Docker with Compose v2")
    engine = subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if engine.returncode != 0:
        raise CheckError(f"no Docker engine answers: {engine.stderr.strip()[-500:]}")


def store_status() -> dict[str, Any]:
    text = compose("exec", "-T", "plateau", "plateau", "status", "--config", CONFIG, "--json")
    document: dict[str, Any] = json.loads(text)
    return document


def landed_and_replicated(document: dict[str, Any]) -> tuple[int, int]:
    """(records in the store, records replicated) from `plateau status --json`."""
    landed = replicated = 0
    for topic in document["topics"].values():
        for row in topic["partitions"].values():
            landed += int(row["records"])
            replicated += int(row["replicated_offset"])
    return landed, replicated


def landed_in(document: dict[str, Any], topic: str) -> int:
    """Records of one topic in the store, from `plateau status --json`."""
    partitions = document["topics"].get(topic, {}).get("partitions", {})
    return sum(int(row["records"]) for row in partitions.values())


def replica_rows() -> int:
    return int(compose("exec", "-T", "spark", "python", "-c", COUNT_REPLICA).strip())


def wait_for(what: str, probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            found = probe()
            if found:
                return found
        except (CheckError, ValueError, KeyError) as exc:
            last = exc  # the service may still be starting
        time.sleep(5)
    raise CheckError(f"{what} did not happen within {timeout_s:.0f}s (last: {last})")


def run(timeout_s: float) -> None:
    compose("up", "-d", "--build", "--wait-timeout", str(int(timeout_s)), capture=False)

    def landed() -> int:
        return landed_and_replicated(store_status())[0]

    records = wait_for("records landing in the store", landed, timeout_s)
    print(f"store: {records} records landed")
    direct = wait_for(
        f"records produced to plateau's Kafka API landing in {DIRECT_TOPIC}",
        lambda: landed_in(store_status(), DIRECT_TOPIC),
        timeout_s,
    )
    print(f"store: {direct} records of {DIRECT_TOPIC} came through the Kafka API")

    def replicated() -> tuple[int, int] | None:
        """(replicated per the manifest, rows in the replica), read between two reads of the
        manifest that agree, so that a replication run finishing meanwhile is not taken for
        a mismatch."""
        before = landed_and_replicated(store_status())[1]
        rows = replica_rows() if before else 0
        after = landed_and_replicated(store_status())[1]
        return (after, rows) if before and before == after else None

    # Replication runs every minute: allow two runs on top of the start-up.
    done, rows = wait_for("records reaching the replica", replicated, timeout_s + 120)
    if rows != done:
        raise CheckError(f"the replica holds {rows} rows, the manifest says {done} replicated")
    print(f"replica: {rows} rows in s3://plateau-replica/plateau, as the manifest records")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per stage")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    args = parser.parse_args(argv)
    try:
        require_docker()
        try:
            run(args.timeout)
        finally:
            if not args.keep:
                compose("down", "-v", "--remove-orphans", capture=False)
    except CheckError as exc:
        print(f"compose-check: {exc}", file=sys.stderr)
        return 1
    print("compose-check: records reached the store and the replica")
    return 0


if __name__ == "__main__":
    sys.exit(main())
