"""The HTTP endpoint of `plateau serve`: /metrics (Prometheus), /healthz and /readyz.

/healthz answers 200 while the process serves at all (for a liveness probe: restart it when
this fails). /readyz answers 200 when workers report, partitions are assigned, Kafka is
reachable and nothing is stalled, else 503 with the reasons as JSON (for a readiness probe
and alerts: it names the stalled partition).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from bridge.errors import BridgeError
from bridge.ops.monitor import Monitor

log = structlog.get_logger(__name__)


class MetricsEndpoint:
    def __init__(self, host: str, port: int, registry: CollectorRegistry, monitor: Monitor) -> None:
        handler = _handler(registry, monitor)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise BridgeError(
                f"metrics.listen {host}:{port}: cannot listen there: {exc.strerror or exc}"
            ) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()
        host, port = self.address
        log.info("metrics_listening", url=f"http://{host}:{port}/metrics")

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(registry: CollectorRegistry, monitor: Monitor) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n", "text/plain; charset=utf-8")
            elif path == "/readyz":
                readiness = monitor.readiness
                self._json(200 if readiness.ready else 503, readiness.document())
            else:
                self._json(404, {"error": f"no such path {path}; try /metrics, /healthz, /readyz"})

        def _json(self, code: int, body: dict[str, Any]) -> None:
            self._send(code, (json.dumps(body) + "\n").encode(), "application/json")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Scrapes every few seconds would drown the lifecycle log."""

    return Handler
