"""Python's thread names reach the kernel (bridge/ops/thread_names.py): `top -H`, `ps -L`
and perf tell serve's threads apart."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bridge.ops.thread_names import name_os_threads

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="thread names are given through Linux's /proc"
)


def kernel_name(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().rstrip("\n")


@contextmanager
def running(name: str) -> Iterator[threading.Thread]:
    done = threading.Event()
    thread = threading.Thread(target=done.wait, name=name, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        done.set()
        thread.join()


def test_each_thread_gets_its_name_once_and_again_when_renamed() -> None:
    with running("journal") as thread:
        assert thread.native_id is not None
        assert name_os_threads() >= 1
        assert kernel_name(thread.native_id) == "journal"
        assert name_os_threads() == 0  # nothing new: nothing written
        thread.name = "seal_0"
        assert name_os_threads() == 1
        assert kernel_name(thread.native_id) == "seal_0"


def test_long_names_are_cut_to_the_kernels_fifteen_bytes_on_a_character() -> None:
    with running("kafka-api-stopper") as ascii_name, running("ab" + "é" * 10) as wide:
        name_os_threads()
        assert ascii_name.native_id is not None and wide.native_id is not None
        assert kernel_name(ascii_name.native_id) == "kafka-api-stopp"
        # 15 bytes would end inside an é: the name stops before it.
        assert kernel_name(wide.native_id) == "ab" + "é" * 6


def test_the_main_thread_keeps_the_process_name() -> None:
    main = threading.main_thread()
    assert main.native_id is not None
    before = kernel_name(main.native_id)
    with running("other"):
        name_os_threads()
    assert kernel_name(main.native_id) == before
    assert before != main.name[:15]
