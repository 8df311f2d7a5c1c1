"""`kill -USR1 PID` writes every thread's Python stack to stderr, and the process goes on.

Not faulthandler's `register`: its dump runs inside the C signal handler without the
interpreter lock, so a thread starting or ending meanwhile can crash the process (seen as
SIGSEGV when the signal came while serve was starting its threads). Here the C handler only
writes the signal's number to a pipe (`signal.set_wakeup_fd`, which it does whatever the
main thread is doing, even stuck in a call), and a thread of its own reads the pipe and
walks the stacks holding the interpreter lock, when no thread can be created or freed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from types import FrameType

_installed = threading.Event()


def install_stack_dump() -> None:
    """SIGUSR1 writes every thread's stack; once per process, from the main thread. Not
    offered without a stderr, or when the wakeup pipe already belongs to something else
    (an event loop)."""
    main = threading.current_thread() is threading.main_thread()
    if _installed.is_set() or sys.stderr is None or not main:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # the C handler must never block on a full pipe
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:
        previous = None
    if previous != -1:
        if previous is not None:
            signal.set_wakeup_fd(previous)  # someone else's: theirs again
        os.close(read_fd)
        os.close(write_fd)
        return
    # A Python-level handler, so the signal no longer terminates the process and the C
    # handler writes its number to the pipe; the main thread's part has nothing to do.
    signal.signal(signal.SIGUSR1, _ignore)
    threading.Thread(
        target=_dump_on_signal, args=(read_fd, int(signal.SIGUSR1)), name="stack-dump", daemon=True
    ).start()
    _installed.set()


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    return None


def _dump_on_signal(read_fd: int, signum: int) -> None:
    while True:
        # Every signal with a Python handler is written here (SIGTERM and SIGINT too).
        numbers = os.read(read_fd, 64)
        if not numbers:
            return
        if signum in numbers:
            write_stacks()


def write_stacks() -> None:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = [f"Stacks of every thread of process {os.getpid()}, most recent call last:\n"]
    for ident, frame in sys._current_frames().items():
        parts.append(f"\nThread {names.get(ident, '?')} ({ident:#x}):\n")
        parts.extend(traceback.format_stack(frame))
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write("".join(parts))
        stream.flush()
    except (OSError, ValueError):  # stderr closed: nowhere left to say it
        pass
