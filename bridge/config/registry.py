"""Where schema-registry formats (avro, protobuf, json_schema) fetch their writer schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from bridge.config.fields import Duration, Strict

# Formats whose records carry a schema id (Confluent's wire format) instead of their schema.
REGISTRY_FORMATS = ("avro", "protobuf", "json_schema")


def shown_url(url: str) -> str:
    """`url` without the password of its user info (the registry client takes
    https://user:password@host as its basic auth), for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    netloc_end = len(rest)
    for stop in "/?#":
        found = rest.find(stop)
        if 0 <= found < netloc_end:
            netloc_end = found
    userinfo, at, host = rest[:netloc_end].rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    # A user info without a colon is often a token: masked whole.
    shown = f"{user}:***" if colon else "***"
    return f"{scheme}{sep}{shown}@{host}{rest[netloc_end:]}"


class RegistryBasicAuth(Strict):
    username: str = Field(min_length=1, description="The registry user (or API key).")
    password: SecretStr = Field(
        description="Prefer PLATEAU__SCHEMA_REGISTRY__BASIC_AUTH__PASSWORD to the file."
    )


class RegistryTls(Strict):
    cafile: Path | None = Field(
        default=None, description="CA bundle to verify the registry with (default: the system's)."
    )
    certfile: Path | None = Field(
        default=None, description="Client certificate, for a registry that asks for one."
    )
    keyfile: Path | None = Field(default=None, description="Private key of the certificate.")
    key_password: SecretStr | None = Field(
        default=None,
        description="Password of an encrypted key; prefer "
        "PLATEAU__SCHEMA_REGISTRY__TLS__KEY_PASSWORD.",
    )

    @model_validator(mode="after")
    def _pair(self) -> RegistryTls:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("certfile and keyfile go together")
        return self


class SchemaRegistryConfig(Strict):
    url: str = Field(
        description="Base URL of a Confluent-compatible schema registry (http:// or https://)."
    )
    basic_auth: RegistryBasicAuth | None = Field(
        default=None, description="HTTP basic authentication; none when absent."
    )
    tls: RegistryTls | None = Field(
        default=None, description="TLS settings for an https:// registry."
    )
    timeout: Duration = Field(
        default=5.0,
        description="How long one registry request may take before it counts as "
        "the registry being unreachable.",
    )
    retry_interval: Duration = Field(
        default=2.0,
        description="While the registry is unreachable, how often a paused partition tries "
        "again (records wait in Kafka meanwhile; none are skipped).",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {shown_url(value)!r}")
        return value.rstrip("/")

    @property
    def shown_url(self) -> str:
        """The URL for messages and logs, without a password."""
        return shown_url(self.url)

    def client_settings(self) -> dict[str, Any]:
        """The settings of confluent-kafka's SchemaRegistryClient. Its own retries are off:
        an unreachable registry pauses the partition, and the partition retries."""
        settings: dict[str, Any] = {
            "url": self.url,
            "timeout": self.timeout,
            "max.retries": 0,
        }
        if self.basic_auth is not None:
            password = self.basic_auth.password.get_secret_value()
            settings["basic.auth.user.info"] = f"{self.basic_auth.username}:{password}"
        tls = self.tls
        if tls is not None:
            if tls.cafile is not None:
                settings["ssl.ca.location"] = str(tls.cafile)
            if tls.certfile is not None and tls.keyfile is not None:
                settings["ssl.certificate.location"] = str(tls.certfile)
                settings["ssl.key.location"] = str(tls.keyfile)
            if tls.key_password is not None:
                settings["ssl.key.password"] = tls.key_password.get_secret_value()
        return settings
