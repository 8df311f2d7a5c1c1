"""serve's malloc settings, each checked in a fresh interpreter (they are process-wide)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from bridge.allocators import MMAP_THRESHOLD, TRIM_THRESHOLD

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")

# Prints the settings chosen (or {} when not tuned), and the free memory glibc's malloc keeps
# after two rounds of 64 frame-sized blocks made and freed (what the listener does per seal).
_PROBE = """
import ctypes, json, sys

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

chosen = {}
if sys.argv[1] == "tune":
    from bridge.allocators import tune_allocators
    chosen = tune_allocators().__dict__
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
for _ in range(2):
    blocks = [bytearray(1 << 20) for _ in range(64)]
    del blocks
chosen["kept_free"] = libc.mallinfo2().fordblks
import pyarrow as pa
chosen["arrow_pool"] = pa.default_memory_pool().backend_name
print(json.dumps(chosen))
"""


def probe(mode: str, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return found


@glibc_only
def test_tuned_freed_frames_stay_for_the_next_round() -> None:
    found = probe("tune")
    assert found["mmap_threshold"] == MMAP_THRESHOLD
    assert found["trim_threshold"] == TRIM_THRESHOLD
    assert isinstance(found["kept_free"], int)
    assert found["kept_free"] >= 48 << 20


@glibc_only
def test_untuned_freed_frames_go_back_to_the_kernel() -> None:
    # The default the tuning exists for: the next round's frames are fresh pages again.
    found = probe("plain")
    assert isinstance(found["kept_free"], int)
    assert found["kept_free"] < 16 << 20


@glibc_only
def test_an_operators_choice_in_the_environment_is_kept() -> None:
    found = probe("tune", MALLOC_MMAP_THRESHOLD_="131072")
    assert found["mmap_threshold"] is None
    assert found["trim_threshold"] == TRIM_THRESHOLD
    # glibc took the operator's 128 KiB: every block is mapped on its own and unmapped.
    assert isinstance(found["kept_free"], int)
    assert found["kept_free"] < 16 << 20


def test_arrows_pool_is_left_as_it_is() -> None:
    # jemalloc for pyarrow's calls took five times the CPU to land `format: arrow` topics
    # (docs/benchmarks.md, "Memory allocators").
    assert probe("tune")["arrow_pool"] == probe("plain")["arrow_pool"]
