"""One client connection as a stream of request frames, each read from the socket straight
into a buffer of its own size.

asyncio's StreamReader copies every byte twice on the way in (into its buffer, then out of
it) and moves what follows a read request down its buffer: under a producer's load that was
a quarter of the listener's time with 1 KiB records (docs/benchmarks.md, the Kafka API). A
BufferedProtocol lets the socket (or TLS) layer write into the frame's own bytearray.

Reading follows the handler: a frame it waits for is handed over and reading goes on; once a
whole frame is waiting that the handler has not taken, reading stops until it does. A
connection the listener holds back (a throttled produce) is therefore not read meanwhile
beyond that one frame, as a Kafka broker does under a quota.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Coroutine
from typing import Any

_SIZE_BYTES = 4
_MIN_FRAME = 8  # api key, version, correlation id, client id length


class FrameError(Exception):
    """The bytes on the connection are not frames (a bad size, or cut inside one)."""


class FramedConnection(asyncio.BufferedProtocol):
    def __init__(
        self, handle: Callable[[FramedConnection], Coroutine[Any, Any, None]], max_frame: int
    ) -> None:
        self._handle = handle
        self.max_frame = max_frame  # the largest frame read; its buffer is made at once
        self.transport: asyncio.Transport | None = None
        self._head = bytearray(_SIZE_BYTES)
        self._body: bytearray | None = None
        self._got = 0
        self._frames: collections.deque[bytearray] = collections.deque()
        self._ended: BaseException | None = None  # what ended reading (FrameError, a loss)
        self._eof = False
        self._wakeup: asyncio.Future[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._paused = False
        self.task: asyncio.Task[None] | None = None
        # For the idle sweep: when bytes last came or went, and the requests taken whose
        # answers have not gone out (the handler keeps this count).
        self.active = time.monotonic()
        self.open_requests = 0

    # --- the transport's side -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.task = asyncio.get_running_loop().create_task(self._handle(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is None:
            return memoryview(self._head)[self._got :]
        return memoryview(self._body)[self._got :]

    def buffer_updated(self, nbytes: int) -> None:
        self._got += nbytes
        self.active = time.monotonic()
        if self._body is None:
            if self._got < _SIZE_BYTES:
                return
            size = int.from_bytes(self._head, "big", signed=True)
            if not _MIN_FRAME <= size <= self.max_frame:
                self._end(FrameError(f"a frame of {size} bytes is not a request"))
                return
            self._body, self._got = bytearray(size), 0
            return
        if self._got == len(self._body):
            self._frames.append(self._body)
            self._body, self._got = None, 0
            if not self._wake() and self.transport is not None and not self._paused:
                # The handler is busy with an earlier frame: stop here. Not when it is
                # waiting for this one: a pause and a resume per request are two more
                # system calls, each a point where the listener can lose the interpreter
                # lock to the journal or a seal for milliseconds.
                self.transport.pause_reading()
                self._paused = True

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ended is None:
            self._ended = exc if exc is not None else ConnectionResetError("connection lost")
        self._eof = True
        self._writable.set()
        self._wake()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # --- the handler's side -------------------------------------------------------------------

    @property
    def peer(self) -> str:
        found: Any = None if self.transport is None else self.transport.get_extra_info("peername")
        return f"{found[0]}:{found[1]}" if found else "?"

    async def frame(self) -> memoryview | None:
        """The next request frame (read-only); None once the client closed the connection
        cleanly.
        Raises FrameError for bytes that are not frames, ConnectionError when the
        connection was lost."""
        while not self._frames:
            if isinstance(self._ended, FrameError):
                raise self._ended
            if self._eof:
                if self._body is not None or self._got:
                    raise FrameError("the connection ended inside a frame")
                if self._ended is not None and not isinstance(self._ended, ConnectionResetError):
                    raise self._ended
                return None
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
        found = self._frames.popleft()
        if self._paused and self.transport is not None and not self._ended:
            self._paused = False
            self.transport.resume_reading()
        return memoryview(found).toreadonly()

    def write(self, data: bytes) -> None:
        self.active = time.monotonic()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def idle(self, now: float) -> float:
        """Seconds since bytes last came or went; 0 while a request waits for its answer."""
        return 0.0 if self.open_requests else now - self.active

    async def drain(self) -> None:
        """Wait while the transport's send buffer is over its high-water mark."""
        await self._writable.wait()

    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _end(self, error: BaseException) -> None:
        self._ended = error
        if self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def _wake(self) -> bool:
        """Wake the handler if it waits for a frame; whether it did."""
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)
            return True
        return False
