"""A schema registry for the tests: confluent-kafka's own in-memory registry
(MockSchemaRegistryClient: its ids, subjects and versions) served over HTTP on loopback with
the Confluent REST API the registry client speaks, so plateau's real client and the
producers' serializers talk to it over a socket, and a test can take it down and bring it
back on the same port (docs/development.md says why no other registry server is used).

Every schema is accepted (compatibility NONE), so a test can register an incompatible
version on purpose.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
    MockSchemaRegistryClient,
)
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bridge.ingest.decode.registry import forget_schema_sources

NOT_FOUND = {"error_code": 40403, "message": "Schema not found"}


class RegistryServer:
    def __init__(self, port: int = 0, basic_auth: tuple[str, str] | None = None) -> None:
        self.registry = MockSchemaRegistryClient({"url": "mock://plateau-tests"})
        self.port = port
        self.basic_auth = basic_auth
        self.requests = 0
        # Soft-deleted versions, as (subject, version): served only to a request that asks
        # for deleted ones too (?deleted=true), as Confluent's registry does.
        self.soft_deleted: set[tuple[str, int]] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()
        # A registry that is up but slow: while `holding` is set each request waits (up to
        # a minute) for `released`; `held` says one is waiting.
        self.holding = threading.Event()
        self.held = threading.Event()
        self.released = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> RegistryServer:
        handler = _handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="registry", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Down: connections to the port are refused until start() again (same schemas)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        # Clients keep connections alive: a registry that is down answers on none of them.
        with self.lock:
            for connection in self.connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            self.connections.clear()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> RegistryServer:
        # A new registry: ids from 1 again, so what the process cached for an earlier one
        # (maybe on this same port) must go.
        forget_schema_sources()
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the API ---------------------------------------------------------------------------

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        parts = [unquote(p) for p in urlsplit(path).path.strip("/").split("/")]
        deleted = parse_qs(urlsplit(path).query).get("deleted", ["false"])[0].lower() == "true"
        store = self.registry._store
        try:
            if method == "POST" and len(parts) == 3 and parts[0] == "subjects":
                registered = self.registry.register_schema_full_response(
                    parts[1], Schema.from_dict(body)
                )
                return 200, {
                    **registered.schema.to_dict(),
                    "id": registered.schema_id,
                    "guid": registered.guid,
                    "subject": registered.subject,
                    "version": registered.version,
                }
            if method == "GET" and parts[:2] == ["schemas", "ids"] and len(parts) == 3:
                return 200, self.registry.get_schema(int(parts[2])).to_dict()
            if method == "GET" and parts[:2] == ["schemas", "ids"] and parts[3:] == ["versions"]:
                found = store.schema_id_index.get(int(parts[2]))
                if found is None:
                    return 404, NOT_FOUND
                return 200, [{"subject": found.subject, "version": found.version}]
            if method == "GET" and parts[0] == "subjects" and len(parts) == 4:
                version: int | str = parts[3] if parts[3] == "latest" else int(parts[3])
                if (parts[1], version) in self.soft_deleted and not deleted:
                    return 404, {"error_code": 40402, "message": "Version not found"}
                registered = self.registry.get_version(parts[1], version)  # type: ignore[arg-type]
                return 200, {
                    **registered.schema.to_dict(),
                    "id": registered.schema_id,
                    "subject": registered.subject,
                    "version": registered.version,
                }
            if method == "GET" and parts[0] == "subjects" and len(parts) == 3:
                return 200, sorted(self.registry.get_versions(parts[1]))
            if method == "GET" and parts == ["subjects"]:
                return 200, sorted(self.registry.get_subjects())
        except SchemaRegistryError:
            return 404, NOT_FOUND
        except (KeyError, ValueError) as exc:
            return 422, {"error_code": 42201, "message": str(exc)}
        return 404, {"error_code": 404, "message": f"no route {method} {path}"}


def _handler(server: RegistryServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def setup(self) -> None:
            super().setup()
            with server.lock:
                server.connections.add(self.connection)

        def finish(self) -> None:
            with server.lock:
                server.connections.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            server.requests += 1
            if server.holding.is_set():
                server.held.set()
                server.released.wait(60)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self._authorized():
                status, body = 401, {"error_code": 401, "message": "Unauthorized"}
            else:
                status, body = server.answer(method, self.path, json.loads(raw) if raw else None)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if server.basic_auth is None:
                return True
            user, password = server.basic_auth
            expected = base64.b64encode(f"{user}:{password}".encode()).decode()
            return self.headers.get("Authorization") == f"Basic {expected}"

    return Handler
