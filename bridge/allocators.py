"""The memory allocators of a serving process: freed buffers kept for the next second's.

plateau's hot path turns over the same amounts of memory every second: Produce frames read
into buffers of their size (glibc's malloc), and each seal's columns (Arrow's pool), freed
once the segment is written. With the defaults both hand that memory back to the kernel
between seals, and take it again as fresh pages, each one faulted in and zeroed:

- Arrow's default pool in the pip wheels is mimalloc, which returns freed pages after 10 ms,
  and its regions are backed by 2 MiB pages that are zeroed whole on first touch;
- glibc serves large blocks with their own mmap (its threshold rises only as far as the
  largest block freed so far) and trims a heap's free top above twice that threshold.

serve therefore takes Arrow's jemalloc pool for pyarrow's calls (it keeps freed pages about
a second before purging them) and fixes glibc's mmap and trim thresholds. Measured with the
Kafka API (bench/allocator_bench.py, docs/benchmarks.md "Memory allocators"): with
librdkafka's 1 MiB batches of 1 KiB records, the kernel's page zeroing fell from 13% of
serve's CPU samples to 1.4%, records/s rose 1.02x and 1.11x in two runs, and peak RSS by
about 140 MB (the kept pages); with the Java client's 16 KiB batches, no difference beyond
the noise. A consumer worker landing 128-byte records used 13% less CPU per record.
An operator's own choice (ARROW_DEFAULT_MEMORY_POOL, MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_ in the environment) is kept.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
from dataclasses import dataclass

import pyarrow as pa
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
    """What tune_allocators chose; None where it left the default or the operator's choice."""

    arrow_pool: str
    mmap_threshold: int | None
    trim_threshold: int | None


def tune_allocators() -> AllocatorSettings:
    """Set Arrow's pool and glibc's thresholds for this process (see the module's doc)."""
    arrow_pool = _arrow_pool()
    mmap_threshold = _mallopt("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    trim_threshold = _mallopt("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    settings = AllocatorSettings(arrow_pool, mmap_threshold, trim_threshold)
    log.info(
        "allocators_tuned",
        arrow_pool=settings.arrow_pool,
        mmap_threshold=settings.mmap_threshold,
        trim_threshold=settings.trim_threshold,
    )
    return settings


def _arrow_pool() -> str:
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        # A pyarrow built without jemalloc keeps its default.
        with contextlib.suppress(NotImplementedError):
            pa.set_memory_pool(pa.jemalloc_memory_pool())
    return str(pa.default_memory_pool().backend_name)


def _mallopt(variable: str, param: int, value: int) -> int | None:
    if variable in os.environ or platform.libc_ver()[0] != "glibc":
        return None
    libc = ctypes.CDLL(None)
    if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) != 1:
        log.warning("mallopt_refused", parameter=variable.strip("_"), value=value)
        return None
    return value
