"""Shared helpers of the benchmarks: synthetic segment-shaped batches, machine facts, RSS.

The batches look like what the bridge appends: `offset` int64 (increasing per partition),
`timestamp` timestamp[ms, UTC], `key` binary (small) and `value` binary. To keep the
pre-generated memory small, the key and value arrays come from a small pool that the batches
share, and the offset/timestamp columns of every batch are zero-copy slices of one array per
column (identical for every partition: offsets count from 0 in each partition).
"""

from __future__ import annotations

import array
import json
import logging
import os
import platform
import random
import resource
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa
import structlog

BASE_MS = 1_700_000_000_000
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
RESULTS_DIR = Path(__file__).resolve().parent / "results"
VALUE_KINDS = ("random", "log")
MB = 1_000_000

_LEVELS = ("INFO",) * 12 + ("WARN", "WARN", "ERROR", "DEBUG")
_SERVICES = ("checkout", "payments", "search", "auth", "inventory", "shipping", "catalog")
_ROUTES = (
    "GET /api/v1/orders",
    "GET /api/v1/cart",
    "GET /api/v2/search",
    "POST /api/v1/orders",
    "PUT /api/v1/cart",
    "GET /api/v1/items",
    "POST /login",
)
_STATUSES = (200,) * 20 + (201, 204, 302, 400, 404, 500)


def int64_array(values: Iterator[int] | range, count: int) -> pa.Array:
    """An int64 array built from Python ints without numpy."""
    buffer = pa.py_buffer(array.array("q", values))
    return pa.Array.from_buffers(pa.int64(), count, [None, buffer])


def random_values(rng: random.Random, rows: int, size: int) -> pa.Array:
    """`rows` incompressible binary values of exactly `size` bytes."""
    data = pa.py_buffer(rng.randbytes(rows * size))
    offsets = pa.py_buffer(array.array("i", range(0, (rows + 1) * size, size)))
    return pa.Array.from_buffers(pa.binary(), rows, [None, offsets, data])


def log_values(rng: random.Random, rows: int) -> pa.Array:
    """`rows` JSON-like access-log lines (about 125-140 bytes each): compressible values."""
    lines = []
    ts = BASE_MS + rng.randrange(10**6)
    for _ in range(rows):
        ts += rng.randrange(3)
        lines.append(
            (
                f'{{"ts":{ts},"lvl":"{rng.choice(_LEVELS)}","svc":"{rng.choice(_SERVICES)}",'
                f'"host":"web-{rng.randrange(32):02d}",'
                f'"req":"{rng.choice(_ROUTES)}/{rng.randrange(10**6)}",'
                f'"status":{rng.choice(_STATUSES)},"ms":{int(rng.expovariate(1 / 40))},'
                f'"user":"u{rng.randrange(10**6):06d}"}}'
            ).encode()
        )
    return pa.array(lines, pa.binary())


def key_values(rng: random.Random, rows: int) -> pa.Array:
    return pa.array([b"user-%06d" % rng.randrange(10**6) for _ in range(rows)], pa.binary())


@dataclass(frozen=True)
class Workload:
    """Pre-generated batches in append order (partitions round-robin)."""

    batches: list[tuple[int, pa.RecordBatch]]
    rows: int
    rows_per_partition: list[int]
    value_kind: str
    arrow_bytes: int  # Arrow in-memory bytes of all four columns (incl. offset buffers)
    value_bytes: int  # bytes of the value payloads alone
    generated_bytes: int  # memory actually held by the generated arrays

    @property
    def schema(self) -> pa.Schema:
        return self.batches[0][1].schema


def build_workload(
    *,
    rows: int,
    batch_rows: int,
    partitions: int,
    value_kind: str,
    value_size: int = 128,
    pool_size: int = 16,
    span_ms: int | None = None,
    seed: int = 42,
) -> Workload:
    """`rows` rows in batches of `batch_rows`, dealt round-robin over `partitions`.

    Timestamps increase with the offset: one per millisecond from BASE_MS when `span_ms` is
    None, otherwise spread evenly over [BASE_MS, BASE_MS + span_ms) in every partition.
    """
    if value_kind not in VALUE_KINDS:
        raise ValueError(f"value kind must be one of {VALUE_KINDS}, got {value_kind!r}")
    if rows % batch_rows:
        raise ValueError(f"rows ({rows}) must be a multiple of batch rows ({batch_rows})")
    rng = random.Random(seed)
    pool: list[tuple[pa.Array, pa.Array]] = []
    for _ in range(pool_size):
        values = (
            random_values(rng, batch_rows, value_size)
            if value_kind == "random"
            else log_values(rng, batch_rows)
        )
        pool.append((key_values(rng, batch_rows), values))
    batch_count = rows // batch_rows
    per_partition = [0] * partitions
    for i in range(batch_count):
        per_partition[i % partitions] += batch_rows
    longest = max(per_partition)
    offsets = int64_array(range(longest), longest)
    if span_ms is None:
        stamps = int64_array(range(BASE_MS, BASE_MS + longest), longest)
    else:
        stamps = int64_array((BASE_MS + o * span_ms // longest for o in range(longest)), longest)
    stamps = stamps.cast(TIMESTAMP_TYPE)
    schema = pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", TIMESTAMP_TYPE),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
        ]
    )
    batches: list[tuple[int, pa.RecordBatch]] = []
    next_offset = [0] * partitions
    arrow_bytes = value_bytes = 0
    for i in range(batch_count):
        partition = i % partitions
        start = next_offset[partition]
        next_offset[partition] += batch_rows
        keys, values = pool[i % pool_size]
        batch = pa.RecordBatch.from_arrays(
            [offsets.slice(start, batch_rows), stamps.slice(start, batch_rows), keys, values],
            schema=schema,
        )
        batches.append((partition, batch))
        arrow_bytes += batch.nbytes
        value_bytes += values.buffers()[2].size
    generated = offsets.nbytes + stamps.nbytes + sum(k.nbytes + v.nbytes for k, v in pool)
    return Workload(
        batches=batches,
        rows=rows,
        rows_per_partition=per_partition,
        value_kind=value_kind,
        arrow_bytes=arrow_bytes,
        value_bytes=value_bytes,
        generated_bytes=generated,
    )


def fresh_copy(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its own copy of the value data, as a consumer decoding new records has."""
    values = batch.column(3)
    validity, offsets, data = values.buffers()
    copied = pa.Array.from_buffers(
        values.type, len(values), [validity, offsets, pa.py_buffer(bytearray(memoryview(data)))]
    )
    return pa.RecordBatch.from_arrays([*batch.columns[:3], copied], schema=batch.schema)


def peak_rss_bytes() -> int:
    """This process's peak resident set size (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def directory_bytes(path: Path) -> tuple[int, int]:
    """(apparent size, allocated size) of the regular files under `path`."""
    apparent = allocated = 0
    for entry in path.rglob("*"):
        if entry.is_file():
            st = entry.stat()
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def quiet_logs() -> None:
    """Only warnings and errors from plateau_core, on stderr (stdout carries the results)."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )


def _meminfo_bytes(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == field:
                return int(rest.split()[0]) * 1024
    except OSError:
        return None
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def revision() -> str | None:
    """`git describe` of the checkout the benchmark ran from ("-dirty" with local changes)."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def machine_info(work_dir: Path) -> dict[str, Any]:
    usage = os.statvfs(work_dir)
    return {
        "revision": revision(),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": _cpu_model(),
        "ram_bytes": _meminfo_bytes("MemTotal"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "sqlalchemy": metadata.version("sqlalchemy"),
        "arrow_memory_pool": pa.default_memory_pool().backend_name,
        "work_dir": str(work_dir),
        "work_dir_free_bytes": usage.f_bavail * usage.f_frsize,
    }


# Options whose value is a folder of the machine the bench ran on: a result file names the
# option, not the folder.
_PATH_OPTIONS = ("--data-dir",)


def command_line(argv: list[str] | None = None) -> str:
    """The command that ran, for a result file: the interpreter's name, the script and its
    options, with the folders of path options left out (`DIR`)."""
    words = list(sys.argv if argv is None else argv)
    for i, word in enumerate(words):
        option, equals, _ = word.partition("=")
        if option not in _PATH_OPTIONS:
            continue
        if equals:
            words[i] = f"{option}=DIR"
        elif i + 1 < len(words):
            words[i + 1] = "DIR"
    return " ".join([Path(sys.executable).name, *words])


def write_results(kind: str, payload: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS_DIR / f"{kind}-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
