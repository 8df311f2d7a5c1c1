"""One client connection's state: who it is, once SASL says so, and what it may write."""

from __future__ import annotations

from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from bridge.config.kafka_api import KafkaApiConfig
from bridge.kafka_api.sasl import AuthenticationError, CredentialsError, Exchange
from bridge.kafka_api.stats import SinkStats

log = structlog.get_logger(__name__)


class Connection:
    def __init__(self, peer: str, api: KafkaApiConfig) -> None:
        self.api = api
        self.peer = peer
        self.exchange = Exchange(api.sasl) if api.sasl is not None else None
        # A failed authentication is answered, then the connection closes (as Kafka closes
        # it): passwords are not tried one after another on one connection.
        self.failed = False

    @property
    def authenticated(self) -> bool:
        return self.exchange is None or self.exchange.principal is not None

    def allowed(self, topic: str) -> bool:
        if self.exchange is None:
            return True
        principal = self.exchange.principal
        return principal is not None and principal.may_write(topic)

    def handshake(self, body: Any, version: int) -> dict[str, Any]:
        """SaslHandshake: the mechanism the client asks for, if it is offered (v1: the
        tokens follow in SaslAuthenticate requests)."""
        offered = [] if self.api.sasl is None else list(self.api.sasl.mechanisms)
        if version == 0:
            return {"error_code": ErrorCode.unsupported_version, "mechanisms": offered}
        if self.exchange is None or not self.exchange.choose(body.mechanism):
            return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": offered}
        return {"error_code": ErrorCode.none, "mechanisms": offered}

    def authenticate(self, body: Any, stats: SinkStats) -> dict[str, Any]:
        """SaslAuthenticate: one step of the exchange; a failure is answered and logged."""
        if self.exchange is None:
            return {
                "error_code": ErrorCode.illegal_sasl_state,
                "error_message": "SASL is not enabled on this listener",
                "auth_bytes": b"",
            }
        try:
            answer = self.exchange.step(body.auth_bytes)
        except AuthenticationError as exc:
            self.failed = True
            log.warning("sasl_failed", peer=self.peer, error=str(exc))
            stats.errors[("SaslAuthenticate", "sasl_authentication_failed")] += 1
            return {
                "error_code": ErrorCode.sasl_authentication_failed,
                "error_message": "authentication failed: "
                + (exc.client_message if isinstance(exc, CredentialsError) else str(exc)),
                "auth_bytes": b"",
            }
        if self.exchange.principal is not None:
            log.info("sasl_authenticated", peer=self.peer, user=self.exchange.principal.name)
        return {"error_code": ErrorCode.none, "auth_bytes": answer, "session_lifetime": 0}
