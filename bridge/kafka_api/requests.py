"""Each request of a connection goes to its API's handler, and the handler's answer becomes
the response frame: Produce's once its acks setting is met, those of the APIs that wait on a
blocking call once it is done (off the event loop), the rest at once. The connection's loop
(server.py) sends the frames in the order the requests came.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from bridge.config.kafka_api import KafkaApiConfig
from bridge.kafka_api import protocol
from bridge.kafka_api.admin import AdminHandler
from bridge.kafka_api.connection import Connection
from bridge.kafka_api.create_partitions import CreatePartitionsHandler
from bridge.kafka_api.log_dirs import LogDirsHandler
from bridge.kafka_api.offsets import OffsetsHandler
from bridge.kafka_api.produce import ProduceHandler
from bridge.kafka_api.protocol import ProtocolError, Request, UnsupportedRequestError
from bridge.kafka_api.sink import ProduceSink
from bridge.kafka_api.stats import SinkStats

log = structlog.get_logger(__name__)

# An API answered once a blocking call is done, off the event loop.
Later = Callable[[Connection, Request], Awaitable[dict[str, Any]]]


class RequestHandler:
    """Answers the requests of every connection of one listener."""

    def __init__(
        self,
        sink: ProduceSink,
        api: KafkaApiConfig,
        stats: SinkStats,
        advertised: tuple[str, int],
    ) -> None:
        self.api = api
        self.stats = stats
        self.admin = AdminHandler(sink, *advertised)
        self.produce = ProduceHandler(sink, api)
        self._later = self._off_the_loop(sink)

    async def answer(
        self, conn: Connection, frame: bytes | memoryview
    ) -> asyncio.Future[bytes | None]:
        """Handle one request; the future holds its response frame (None: no response)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes | None] = loop.create_future()
        try:
            request = protocol.parse_request(frame)
        except UnsupportedRequestError as exc:
            if not conn.authenticated and exc.api_key not in protocol.BEFORE_AUTH:
                raise ProtocolError(
                    f"{protocol.api_name(exc.api_key)} before SASL authentication"
                ) from None
            response = protocol.error_response(exc, ErrorCode.unsupported_version)
            if protocol.negotiating(exc):
                # A client newer than this listener asks its own newest ApiVersions first
                # and asks again in a version of the answer's list (franz-go does on every
                # connection): the protocol's way to agree, not an error to count or warn of.
                log.debug("kafka_api_versions_newer", peer=conn.peer, version=exc.api_version)
                done.set_result(response)
                return done
            self.stats.errors[(protocol.api_name(exc.api_key), "unsupported_version")] += 1
            log.warning(
                "kafka_request_unsupported",
                peer=conn.peer,
                error=str(exc),
                answered=response is not None,
            )
            if response is None:
                raise ProtocolError(str(exc)) from None
            done.set_result(response)
            return done
        name = protocol.api_name(request.api_key)
        self.stats.requests[name] += 1
        if not conn.authenticated and request.api_key not in protocol.BEFORE_AUTH:
            raise ProtocolError(f"{name} before SASL authentication")
        if request.api_key == protocol.FETCH:
            return self._refuse(request, "the listener takes produce traffic only")
        if request.api_key == protocol.PRODUCE:
            accepted = await self.produce.accept(request.body, conn.allowed)
            if request.body.acks == 0:
                if accepted.refused:
                    # Kafka's way to tell a producer that hears nothing: the connection
                    # closes, and the producer refreshes its metadata.
                    names = sorted({code.name for code in accepted.refused})
                    raise ProtocolError(f"an acks=0 produce was refused: {', '.join(names)}")
                done.set_result(None)
                return done

            def produced(_: object = None) -> None:
                if done.done():  # cancelled: the connection's sender stopped
                    return
                try:
                    done.set_result(self._encode(request, accepted.respond()))
                except Exception as exc:  # the sender logs it and closes the connection
                    done.set_exception(exc)

            if accepted.ready is None or accepted.ready.done():
                produced()
            else:
                accepted.ready.add_done_callback(produced)
            return done
        later = self._later.get(request.api_key)
        if later is not None:

            async def answered() -> bytes | None:
                return self._encode(request, await later(conn, request))

            return asyncio.ensure_future(answered())
        body = self._admin(conn, request)
        done.set_result(self._encode(request, body))
        return done

    def _refuse(self, request: Request, why: str) -> asyncio.Future[bytes | None]:
        response = protocol.error_response(request, ErrorCode.unsupported_version)
        name = protocol.api_name(request.api_key)
        self.stats.errors[(name, "unsupported_version")] += 1
        if response is None:
            raise ProtocolError(f"{name} v{request.api_version}: {why}")
        done: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        done.set_result(response)
        return done

    def _encode(self, request: Request, body: dict[str, Any]) -> bytes:
        return protocol.encode_response(
            request.api_key, request.api_version, request.correlation_id, body
        )

    def _off_the_loop(self, sink: ProduceSink) -> dict[int, Later]:
        """The APIs that wait for a blocking call: Metadata, CreateTopics and CreatePartitions
        may open partitions, InitProducerId writes the manifest, ListOffsets may read (and
        seal) segments, DescribeLogDirs reads the manifest."""
        admin, auto_create = self.admin, self.api.auto_create_topics
        offsets, growth, log_dirs = (
            OffsetsHandler(sink),
            CreatePartitionsHandler(sink),
            LogDirsHandler(sink),
        )
        return {
            protocol.METADATA: lambda conn, r: admin.metadata(
                r.body, r.api_version, auto_create, conn.allowed
            ),
            protocol.CREATE_TOPICS: lambda conn, r: admin.create_topics(r.body, conn.allowed),
            protocol.INIT_PRODUCER_ID: lambda _conn, r: admin.init_producer_id(r.body),
            protocol.CREATE_PARTITIONS: lambda conn, r: growth.create_partitions(
                r.body, conn.allowed
            ),
            protocol.LIST_OFFSETS: lambda conn, r: offsets.list_offsets(r.body, conn.allowed),
            protocol.DESCRIBE_LOG_DIRS: lambda conn, r: log_dirs.describe_log_dirs(
                r.body, conn.allowed
            ),
        }

    def _admin(self, conn: Connection, request: Request) -> dict[str, Any]:
        key, body = request.api_key, request.body
        if key == protocol.API_VERSIONS:
            return self.admin.api_versions(body)
        if key == protocol.DESCRIBE_CLUSTER:
            return self.admin.describe_cluster(body)
        if key == protocol.DESCRIBE_CONFIGS:
            return self.admin.describe_configs(body, conn.allowed)
        if key == protocol.SASL_HANDSHAKE:
            return conn.handshake(body, request.api_version)
        if key == protocol.SASL_AUTHENTICATE:
            return conn.authenticate(body, self.stats)
        raise ProtocolError(f"{protocol.api_name(key)} has no handler")
