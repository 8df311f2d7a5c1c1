"""The listener's TLS context from `kafka_api.tls`, or an error naming the file that does not
load and why: OpenSSL's own errors name neither ("No such file or directory", "PEM lib")."""

from __future__ import annotations

import ssl
from pathlib import Path

from bridge.config.kafka_api import KafkaApiTls
from bridge.errors import ConfigError


def server_context(tls: KafkaApiTls) -> ssl.SSLContext:
    """Raises ConfigError naming the key (kafka_api.tls.certfile, ...) and its file."""
    texts = {
        key: _read(key, path)
        for key, path in (
            ("certfile", tls.certfile),
            ("keyfile", tls.keyfile),
            ("cafile", tls.cafile),
        )
        if path is not None
    }
    if "-----BEGIN CERTIFICATE-----" not in texts["certfile"]:
        raise ConfigError(f"kafka_api.tls.certfile {tls.certfile}: holds no PEM certificate")
    if "PRIVATE KEY-----" not in texts["keyfile"]:
        raise ConfigError(f"kafka_api.tls.keyfile {tls.keyfile}: holds no PEM private key")
    encrypted = "ENCRYPTED" in texts["keyfile"]
    if encrypted and tls.password is None:
        # Without a password OpenSSL asks for one on the terminal (serve then hangs at start)
        # or, with none, fails with "Invalid argument".
        raise ConfigError(
            f"kafka_api.tls.keyfile {tls.keyfile}: the key is encrypted; give its password "
            "as kafka_api.tls.password (PLATEAU__KAFKA_API__TLS__PASSWORD)"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    password = tls.password.get_secret_value() if tls.password is not None else ""
    try:
        context.load_cert_chain(tls.certfile, tls.keyfile, lambda: password)
    except (ssl.SSLError, OSError) as exc:
        why = "the password is wrong or " if encrypted else ""
        raise ConfigError(
            f"kafka_api.tls: the key {tls.keyfile} does not load with the certificate "
            f"{tls.certfile} ({why}the key is not the certificate's, or one is damaged): "
            f"{_reason(exc)}"
        ) from None
    if tls.cafile is not None:
        try:
            context.load_verify_locations(tls.cafile)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"kafka_api.tls.cafile {tls.cafile}: holds no PEM CA certificate: {_reason(exc)}"
            ) from None
    if tls.client_auth == "required":
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _read(key: str, path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(
            f"kafka_api.tls.{key} {path}: cannot read: {exc.strerror or exc}"
        ) from None


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason) if reason else str(exc)
