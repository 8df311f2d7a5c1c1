"""The listener's blocking calls (the manifest, a registry, the final seals), each on a
daemon thread of its own instead of asyncio's default executor.

That executor is a ThreadPoolExecutor, whose threads the interpreter joins at exit. A call
stuck there (the final seals, waiting on a disk) then held serve's exit past the deadline
serve's stop gives the listener, for as long as the call took. On a daemon thread serve
exits when its stop says so, and the journal's replay at the next start takes what was not
sealed, as after a crash. Calls are few (a producer id, a topic's creation, a sweep, the
stop), so a thread each costs nothing that shows.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_numbers = itertools.count(1)


def off_loop(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
    """`fn(*args, **kwargs)` on a new daemon thread (`kafka-api-call-N`), awaitable from
    the running loop."""
    future: Future[T] = Future()

    def call() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the awaiting coroutine, as a pool does
            future.set_exception(exc)
        else:
            future.set_result(result)

    waited = asyncio.wrap_future(future)
    name = f"kafka-api-call-{next(_numbers)}"
    threading.Thread(target=call, name=name, daemon=True).start()
    return waited
