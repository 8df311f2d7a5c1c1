"""Request frames read off a real loopback connection: a handler waiting for frames gets them
without reading being paused, and a busy one stops reading after one frame more."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import Any

from bridge.kafka_api.framing import FramedConnection

Handler = Callable[[FramedConnection], Coroutine[Any, Any, None]]


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def serve(handler: Handler, payload: bytes) -> list[str]:
    """Connect, send `payload`, run `handler` on the connection; returns what its transport
    was asked to do (pause, resume), in order."""
    loop = asyncio.get_running_loop()
    made: asyncio.Future[FramedConnection] = loop.create_future()
    calls: list[str] = []

    def protocol() -> FramedConnection:
        framed = FramedConnection(handler, max_frame=1 << 20)
        original = framed.connection_made

        def connection_made(transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            pause, resume = transport.pause_reading, transport.resume_reading

            def paused() -> None:
                calls.append("pause")
                pause()

            def resumed() -> None:
                calls.append("resume")
                resume()

            transport.pause_reading = paused  # type: ignore[method-assign]
            transport.resume_reading = resumed  # type: ignore[method-assign]
            original(transport)
            made.set_result(framed)

        framed.connection_made = connection_made  # type: ignore[method-assign]
        return framed

    server = await loop.create_server(protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    try:
        framed = await asyncio.wait_for(made, 5)
        client.sendall(payload)  # small: it fits the socket's buffer at once
        assert framed.task is not None
        await asyncio.wait_for(framed.task, 5)
    finally:
        client.close()
        server.close()
    return calls


def test_a_handler_waiting_for_frames_gets_each_without_reading_paused() -> None:
    bodies = [bytes([n]) * (8 + 1000 * n) for n in range(1, 6)]
    got: list[bytes] = []

    async def handler(framed: FramedConnection) -> None:
        while len(got) < len(bodies):
            found = await framed.frame()
            assert found is not None
            got.append(bytes(found))

    calls = asyncio.run(serve(handler, b"".join(frame(b) for b in bodies)))
    assert got == bodies
    # Reading pauses only when a frame completes while the handler is busy, and every pause
    # is undone once the frame waiting is taken.
    assert calls.count("pause") == calls.count("resume")
    assert calls.count("pause") < len(bodies) - 1


def test_a_busy_handler_stops_reading_after_one_frame_more() -> None:
    bodies = [bytes([n]) * 64 for n in range(1, 5)]

    seen: list[bytes] = []
    queued: list[int] = []
    reading: list[bool] = []

    async def handler(framed: FramedConnection) -> None:
        first = await framed.frame()
        assert first is not None
        seen.append(bytes(first))
        # Busy with the first frame: the second is read, then reading stops.
        for _ in range(200):
            if framed._frames:  # the frames read ahead
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert framed.transport is not None
        queued.append(len(framed._frames))
        reading.append(framed.transport.is_reading())
        while len(seen) < len(bodies):
            found = await framed.frame()
            assert found is not None
            seen.append(bytes(found))

    calls = asyncio.run(serve(handler, b"".join(frame(b) for b in bodies)))
    assert queued == [1]
    assert reading == [False]
    assert calls[0] == "pause"
    assert seen == bodies
