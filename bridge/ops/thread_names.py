"""Python's thread names given to the threads the kernel sees, so that `top -H`, `ps -L`,
`perf` and /proc tell serve's threads apart (the listener, the journal, the seals). Python
3.11 keeps a thread's name on its own object only: every thread of serve shows as its
program's name."""

from __future__ import annotations

import threading
from pathlib import Path

# The kernel keeps 15 bytes of a thread's name.
_NAME_BYTES = 15
_TASKS = Path("/proc/self/task")
# native id -> the name given to it, so that each thread is written once.
_given: dict[int, str] = {}
_lock = threading.Lock()


def name_os_threads() -> int:
    """Give every live thread but the main one its Python name in the kernel (Linux; nothing
    elsewhere). Cheap once every thread is named: call it as often as threads may start.
    Returns how many threads were named by this call."""
    if not _TASKS.is_dir():
        return 0
    main = threading.main_thread()
    named = 0
    with _lock:
        live = {}
        for thread in threading.enumerate():
            native = thread.native_id
            # The main thread's name is the process's name (ps, pidof, systemd): not ours.
            if native is None or thread is main:
                continue
            name = thread.name.encode("utf-8", "replace")[:_NAME_BYTES].decode("utf-8", "ignore")
            if _given.get(native) != name:
                try:
                    (_TASKS / str(native) / "comm").write_text(name)
                except OSError:
                    continue  # it ended meanwhile; a thread taking its id is named then
                named += 1
            live[native] = name
        # Ids of ended threads are reused by the kernel: forget them.
        _given.clear()
        _given.update(live)
    return named
