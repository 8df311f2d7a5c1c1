"""The Kafka protocol listener: an asyncio server on its own thread, beside serve's
consumer workers, writing produced records through its own Writer of the same store.

Per connection, requests are read one after another and answered in the order they came,
as the protocol requires; a produce request's wait for durability overlaps the next
requests, so a producer's in-flight requests seal together.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import threading
import time
from typing import Any

import structlog

from bridge.config.kafka_api import KafkaApiConfig
from bridge.config.models import Config
from bridge.errors import ConfigError
from bridge.kafka_api.connection import Connection
from bridge.kafka_api.daemon_calls import off_loop
from bridge.kafka_api.framing import FramedConnection, FrameError
from bridge.kafka_api.protocol import ProtocolError
from bridge.kafka_api.requests import RequestHandler
from bridge.kafka_api.sink import ProduceSink
from bridge.kafka_api.stats import SinkStats
from bridge.kafka_api.status import partition_rows
from bridge.kafka_api.tls import server_context
from bridge.ops.stack_dump import write_stacks
from bridge.ops.thread_names import name_os_threads
from bridge.ops.worker_status import WRITE_INTERVAL_S, StatusFile, new_run_id
from plateau_core import Store

log = structlog.get_logger(__name__)

NAME = "kafka-api"

# Kafka's socket.request.max.bytes: a frame above this closes the connection unread.
REQUEST_MAX_BYTES = 100 * 1024 * 1024
# Before SASL authentication: a frame's buffer is allocated when its size arrives, so a
# client that has not said who it is gets Kafka's sasl.server.max.receive.size.
UNAUTHENTICATED_MAX_BYTES = 512 * 1024
PRODUCER_SWEEP_S = 600.0  # how often producers silent for producer_expiry are forgotten


class KafkaApiServer:
    def __init__(
        self,
        config: Config,
        store: Store,
        stats: SinkStats | None = None,
        *,
        run: str | None = None,
    ) -> None:
        if config.kafka_api is None:
            raise ValueError("the config has no kafka_api section")
        self.config = config
        self.api: KafkaApiConfig = config.kafka_api
        self.store = store
        self.stats = stats or SinkStats()
        self.address: tuple[str, int] | None = None
        self.sink: ProduceSink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kafka-api", daemon=True)
        self._connections: set[FramedConnection] = set()
        self.requests: RequestHandler | None = None  # once listening
        self._max_frame = max(REQUEST_MAX_BYTES, 2 * self.api.message_max_bytes)
        self._status = StatusFile(config.storage.data_dir, NAME, run or new_run_id())

    # --- lifecycle (called from serve's thread) -----------------------------------------------

    def start(self, timeout_s: float = 60.0) -> tuple[str, int]:
        """Open the produced partitions and listen; returns the bound address."""
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"the Kafka API listener did not start within {timeout_s} s")
        if self._failure is not None:
            raise self._failure
        assert self.address is not None
        return self.address

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop listening, answer what is in flight, seal what is buffered. What went wrong
        on the way (the final seals failed, or the listener did not stop in time) is in
        `failure` afterwards."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopping.set)
        waited = timeout_s + 5
        self._thread.join(waited)
        if self._thread.is_alive() and self._failure is None:
            self._failure = TimeoutError(
                f"the Kafka API listener did not stop within {waited:.0f} s"
            )
            log.error("kafka_api_stop_timed_out", timeout_s=waited)
            # What it is stuck on, for the operator to read in the log: serve goes on and
            # exits, and the journal's replay takes what was not sealed.
            write_stacks()

    @property
    def failure(self) -> BaseException | None:
        """Why the listener's thread ended other than by a clean stop (None: it did not)."""
        return self._failure

    def snapshot(self) -> dict[str, Any]:
        found = self.stats.snapshot()
        if self.address is not None:
            found["listen"] = f"{self.address[0]}:{self.address[1]}"
        found["durability"] = self.api.durability
        journal = None if self.sink is None else self.sink.writer.journal
        if journal is not None:
            found["journal"] = journal.snapshot()
        return found

    # --- the loop thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except ConfigError as exc:  # a settings problem, said in full: no traceback to read
            self._failure = exc
            log.error("kafka_api_failed", error=str(exc))
        except BaseException as exc:
            self._failure = exc
            log.exception("kafka_api_failed", error=str(exc))
        finally:
            self._ready.set()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stopping = asyncio.Event()
        # Before any partition is opened: a certificate that does not load ends the start
        # with nothing acquired.
        tls = None if self.api.tls is None else server_context(self.api.tls)
        sink = ProduceSink(self.config, self.api, self.store, loop, self.stats)
        self.sink = sink
        sink.open()
        host, port = self.api.address
        first = self._max_frame if self.api.sasl is None else UNAUTHENTICATED_MAX_BYTES
        server = await loop.create_server(
            lambda: FramedConnection(self._connection, first), host, port, ssl=tls
        )
        bound = server.sockets[0].getsockname()
        self.address = (str(bound[0]), int(bound[1]))
        advertised = self.api.advertised_address or self.address
        self.requests = RequestHandler(sink, self.api, self.stats, advertised)
        log.info(
            "kafka_api_listening",
            listen=f"{self.address[0]}:{self.address[1]}",
            advertised=f"{advertised[0]}:{advertised[1]}",
            topics=dict(sink.topics.partitions),
            tls=self.api.tls is not None,
            sasl=None if self.api.sasl is None else list(self.api.sasl.mechanisms),
        )
        self._ready.set()
        reporter = asyncio.create_task(self._report())
        try:
            await self._stopping.wait()
        finally:
            reporter.cancel()
            server.close()
            for framed in list(self._connections):
                framed.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
            # A topic still being opened: its partitions are released with the others.
            await sink.creation.created()
            await off_loop(sink.close, self.config.shutdown_timeout)
            self._status.write({**self._status_body(), "stopped": True})
            log.info(
                "kafka_api_stopped",
                **{
                    k: v
                    for k, v in self.stats.snapshot().items()
                    if k in ("records", "throttled_requests")
                },
            )

    async def _report(self) -> None:
        """The status file `plateau status`, /metrics and /readyz read, once a second; and
        now and then, idempotent producers silent for producer_expiry are forgotten."""
        swept = time.monotonic()
        while True:
            self._status.write(self._status_body())
            name_os_threads()  # the seals' threads start when first needed
            self._close_idle()
            if self.sink is not None and time.monotonic() - swept >= PRODUCER_SWEEP_S:
                swept = time.monotonic()
                self.sink.expire_producers()
                try:
                    await off_loop(self.sink.expire_stored_producers)
                except Exception as exc:  # the manifest's write: the next sweep tries again
                    # Raised out of this task, it would end the status file too, and /readyz
                    # would say the listener stopped reporting until serve restarts.
                    log.warning(
                        "producer_sweep_failed", error=str(exc), error_type=type(exc).__name__
                    )
            await asyncio.sleep(WRITE_INTERVAL_S)

    def _close_idle(self) -> None:
        """Close the connections quiet for connections_max_idle (none waits for an answer)."""
        now = time.monotonic()
        limit = self.api.connections_max_idle
        for framed in list(self._connections):
            idle = framed.idle(now)
            if idle > limit and not framed.closing():
                self.stats.closed_connections["idle"] += 1
                log.info("kafka_connection_idle", peer=framed.peer, idle_s=round(idle, 1))
                framed.close()

    def _status_body(self) -> dict[str, Any]:
        sink = self.sink
        partitions = [] if sink is None else partition_rows(sink)
        return {"worker": NAME, "role": NAME, "partitions": partitions, NAME: self.snapshot()}

    # --- connections ----------------------------------------------------------------------

    async def _connection(self, framed: FramedConnection) -> None:
        requests = self.requests
        assert requests is not None  # connections are taken once listening
        conn = Connection(framed.peer, self.api)
        self.stats.connections += 1
        self.stats.connections_total += 1
        self._connections.add(framed)
        answers = _Answers()
        sender = asyncio.create_task(self._send(framed, answers))
        reason = "closed by client"
        try:
            while True:
                frame = await framed.frame()
                if frame is None:
                    break
                framed.open_requests += 1
                answer = await requests.answer(conn, frame)
                answers.put(answer)
                if conn.failed:
                    reason = "SASL authentication failed"
                    break
                if framed.max_frame != self._max_frame and conn.authenticated:
                    framed.max_frame = self._max_frame
        except (ProtocolError, FrameError) as exc:
            reason = str(exc)
            self.stats.closed_connections["protocol_error"] += 1
            log.warning("kafka_connection_closed", peer=conn.peer, reason=reason)
        except (ConnectionError, ssl.SSLError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            # A fault handling one request ends its connection only; left to the task, it
            # was logged as "closed by client" and the error nowhere until collected.
            reason = f"{type(exc).__name__}: {exc}"
            self.stats.closed_connections["internal_error"] += 1
            log.exception("kafka_connection_failed", peer=conn.peer, error=reason)
        finally:
            answers.put(None)
            with contextlib.suppress(Exception):
                await sender
            self._connections.discard(framed)
            framed.close()
            self.stats.connections -= 1
            log.debug("kafka_connection_ended", peer=conn.peer, reason=reason)

    async def _send(self, framed: FramedConnection, answers: _Answers) -> None:
        while True:
            answer = await answers.get()
            if answer is None:
                return
            out: list[bytes] = []
            try:
                data = await answer
                if data is not None:
                    out.append(data)
                # The answers done already go out with it, in one send: the requests of a
                # connection in flight are mostly answered at once (by one journal sync).
                following = answers.done()
                for done in following:
                    data = done.result()
                    if data is not None:
                        out.append(data)
            except Exception as exc:
                log.exception("kafka_request_failed", error=str(exc))
                framed.close()
                return
            if out and not framed.closing():
                framed.write(b"".join(out) if len(out) > 1 else out[0])
                await framed.drain()
            framed.open_requests -= 1 + len(following)
            framed.active = time.monotonic()


class _Answers:
    """A connection's responses in the order its requests came (None ends it)."""

    def __init__(self) -> None:
        self._queue: collections.deque[asyncio.Future[bytes | None] | None] = collections.deque()
        self._added = asyncio.Event()

    def put(self, answer: asyncio.Future[bytes | None] | None) -> None:
        self._queue.append(answer)
        self._added.set()

    async def get(self) -> asyncio.Future[bytes | None] | None:
        while not self._queue:
            self._added.clear()
            await self._added.wait()
        return self._queue.popleft()

    def done(self) -> list[asyncio.Future[bytes | None]]:
        """Take the answers at the front that are ready, up to the first that is not."""
        ready = []
        while self._queue and (first := self._queue[0]) is not None and first.done():
            ready.append(first)
            self._queue.popleft()
        return ready
