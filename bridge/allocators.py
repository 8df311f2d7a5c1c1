"""glibc's malloc in a serving process: freed buffers kept for the next second's.

plateau's hot path turns over the same amounts of memory every second: Produce frames read
into buffers of their size, the consumer's per-poll objects, each seal's scratch memory,
all freed once the segment is written. glibc serves large blocks with their own mmap (its
threshold rises only as far as the largest block freed so far) and trims a heap's free top
above twice that threshold, so that memory went back to the kernel between seals and came
again as fresh pages, each one faulted in and zeroed. serve fixes both thresholds instead.

Measured (bench/allocator_bench.py, docs/benchmarks.md "Memory allocators"): serve's CPU
per record lower with librdkafka's 1 MiB produce batches of 1 KiB records and when a worker
lands 128-byte records from Kafka, for some more peak RSS (the kept pages). Arrow's own pool
is left as it is: its jemalloc pool cut a little more CPU on those paths, but took five
times the CPU to land `format: arrow` topics (a fresh, faulted-in extent for each large
buffer). An operator's own choice (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ in the
environment) is kept.
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

# Blocks below this come from glibc's heaps and are reused there (glibc's own ceiling for
# the threshold it adjusts, on 64-bit); larger ones still get their own mapping.
MMAP_THRESHOLD = 32 * 1024 * 1024
# Free memory at a heap's top kept for reuse, about a second of produce traffic at 1 KiB.
TRIM_THRESHOLD = 256 * 1024 * 1024
# mallopt's parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@dataclass(frozen=True)
class AllocatorSettings:
    """What tune_allocators set; None where it left glibc's default or the operator's choice
    (or where the C library is not glibc)."""

    mmap_threshold: int | None
    trim_threshold: int | None


def tune_allocators() -> AllocatorSettings:
    """Fix glibc's mmap and trim thresholds for this process (see the module's doc)."""
    libc = ctypes.CDLL(None) if platform.libc_ver()[0] == "glibc" else None
    settings = AllocatorSettings(
        _mallopt(libc, "MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        _mallopt(libc, "MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    )
    log.info(
        "allocators_tuned",
        mmap_threshold=settings.mmap_threshold,
        trim_threshold=settings.trim_threshold,
    )
    return settings


def _mallopt(libc: ctypes.CDLL | None, variable: str, param: int, value: int) -> int | None:
    if libc is None or variable in os.environ:
        return None
    if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) != 1:
        log.warning("mallopt_refused", parameter=variable.strip("_"), value=value)
        return None
    return value
