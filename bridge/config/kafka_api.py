"""The `kafka_api` section: plateau's own Kafka protocol listener, its TLS, SASL users and
their topic allowlists."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from bridge.config.fields import Duration, Size, Strict
from plateau_core.policies import JOURNAL_MIN_BYTES

MAX_UNCOMPRESSED_BATCH_BYTES = 64 * 1024 * 1024
# Arrow's binary offsets are 32-bit: a seal holds less than 2 GiB of values.
_UNCOMPRESSED_CEILING = 2**31 - 1


class KafkaApiTls(Strict):
    certfile: Path = Field(description="PEM certificate chain the listener presents.")
    keyfile: Path = Field(description="PEM private key of the certificate.")
    password: SecretStr | None = Field(
        default=None,
        description="Password of an encrypted key; prefer PLATEAU__KAFKA_API__TLS__PASSWORD.",
    )
    cafile: Path | None = Field(
        default=None, description="CA bundle to verify client certificates with."
    )
    client_auth: Literal["none", "required"] = Field(
        default="none", description="required: clients must present a certificate the CA signed."
    )

    @model_validator(mode="after")
    def _ca_for_clients(self) -> KafkaApiTls:
        if self.client_auth == "required" and self.cafile is None:
            raise ValueError("client_auth: required needs a cafile to verify clients with")
        return self


class KafkaApiUser(Strict):
    name: str = Field(min_length=1, description="The SASL user name.")
    password: SecretStr = Field(
        description="Prefer PLATEAU__KAFKA_API__SASL__USERS__<N>__PASSWORD to the file."
    )
    topics: list[str] | None = Field(
        default=None,
        description="Topics this user may produce to (shell-style patterns like app-*); "
        "default all.",
    )


class KafkaApiSasl(Strict):
    mechanisms: list[Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]] = Field(
        default=["SCRAM-SHA-256", "SCRAM-SHA-512"],
        min_length=1,
        description="Mechanisms offered; PLAIN sends the password itself, so only over TLS.",
    )
    users: list[KafkaApiUser] = Field(min_length=1, description="Who may connect.")

    @model_validator(mode="after")
    def _unique_users(self) -> KafkaApiSasl:
        names = [u.name for u in self.users]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"user listed twice: {repeated}")
        return self


class KafkaApiConfig(Strict):
    listen: str = Field(
        default="127.0.0.1:9092",
        description="host:port the Kafka protocol listener binds; loopback by default.",
    )
    advertised: str | None = Field(
        default=None,
        description="host:port Metadata answers with, where producers reconnect (default: "
        "listen; required when listen is 0.0.0.0).",
    )
    default_partitions: int = Field(
        default=8,
        ge=1,
        le=10_000,
        description="Partitions of topics created by producers or CreateTopics without a "
        "count, and of produced topics without `partitions`.",
    )
    auto_create_topics: bool = Field(
        default=False,
        description="A produce to an unknown topic creates it (format raw); otherwise it is "
        "refused with UNKNOWN_TOPIC_OR_PARTITION.",
    )
    message_max_bytes: Size = Field(
        default=1024 * 1024,
        description="The largest record batch accepted (Kafka's message.max.bytes); a larger "
        "one is refused with MESSAGE_TOO_LARGE.",
    )
    max_uncompressed_batch_bytes: Size = Field(
        default=MAX_UNCOMPRESSED_BATCH_BYTES,
        le=_UNCOMPRESSED_CEILING,
        description="The most a compressed batch's records may expand to (gzip, snappy, lz4, "
        "zstd); message_max_bytes bounds the compressed size only, and a megabyte of "
        "gzip'd zeros is a gigabyte. A batch that expands past it is refused with "
        "MESSAGE_TOO_LARGE, found without decompressing it whole. At least "
        "message_max_bytes; the writer counts a batch's memory by this decompressed size.",
    )
    durability: Literal["journal", "segment"] = Field(
        default="journal",
        description="What acks=all waits for. journal: the batch is written and synced to "
        "the store's journal (data_dir/journal), one sequential write and sync for every "
        "produce request in flight; the records are queryable once sealed, within the "
        "topic's roll.max_age (1 s for produced topics unless set). segment: the batch is in "
        "a sealed segment file recorded in the manifest, so it is queryable when "
        "acknowledged, at a fraction of the records/s (a segment file per partition and a "
        "manifest commit per round). Both survive kill -9 and power loss.",
    )
    journal_max_bytes: Size | None = Field(
        default=None,
        description="durability: journal only. Soft limit of the journal's files on disk "
        "(default: storage.memory_budget, at least 32MiB). Files go oldest first, once every "
        "record in them "
        "is sealed, so a partition with old unsealed records (a long roll.max_age) keeps "
        "every file written since; past this size those partitions seal early. The journal "
        "is not counted in storage.max_bytes.",
    )
    producer_expiry: Duration = Field(
        default=86400,
        ge=60,
        description="An idempotent producer's state (its epoch and last batches per partition, "
        "kept in the manifest) is forgotten after this long without a write, as Kafka's "
        "producer.id.expiration.ms: every restart of a Java producer takes a new producer "
        "id, and the state would otherwise grow without end. A batch it retries after that "
        "is taken as new.",
    )
    group_commit_hold: Duration = Field(
        default=0.015,
        ge=0,
        le=1,
        description="durability: segment only. acks=all group commit: after a seal of small "
        "files (under 256 KiB each on average) the next seal waits until as many produce "
        "requests came in as that seal answered (the producers' next batches), at most this "
        "long and never longer than the "
        "seal took. Under load: fewer, larger seals and more records/s; a batch may wait "
        "this much longer. 0: seal at once.",
    )
    connections_max_idle: Duration = Field(
        default=600,
        gt=0,
        description="A connection with no request in flight that sends nothing for this "
        "long is closed, as Kafka's connections.max.idle.ms: a client gone without "
        "closing its socket (its host lost, a network cut) would otherwise hold it, and a "
        "file descriptor, for good. Clients connect again when they next send.",
    )
    timestamp_after_max: Duration | None = Field(
        default=3600,
        gt=0,
        description="A batch of a CreateTime topic holding a record timestamped more than "
        "this far ahead of plateau's clock is refused with INVALID_TIMESTAMP, as Kafka's "
        "message.timestamp.after.max.ms (1h) refuses it: retention ages segments by their "
        "newest timestamp, so a segment holding a record from the far future would never "
        "expire by age. null: no limit.",
    )
    tls: KafkaApiTls | None = Field(default=None, description="TLS on the listener.")
    sasl: KafkaApiSasl | None = Field(
        default=None, description="SASL authentication on the listener, with its users."
    )

    @field_validator("listen", "advertised")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"must be host:port (like 127.0.0.1:9092), got {value!r}")
        return value

    @field_validator("journal_max_bytes")
    @classmethod
    def _journal_room(cls, value: int | None) -> int | None:
        if value is not None and value < JOURNAL_MIN_BYTES:
            raise ValueError(f"must be at least 32MiB (two journal files), got {value} bytes")
        return value

    @model_validator(mode="after")
    def _room_for_uncompressed(self) -> KafkaApiConfig:
        # An uncompressed batch may be message_max_bytes: a compressed one expanding to
        # as much is no larger.
        if self.max_uncompressed_batch_bytes < self.message_max_bytes:
            raise ValueError(
                f"max_uncompressed_batch_bytes ({self.max_uncompressed_batch_bytes}) must be "
                f"at least message_max_bytes ({self.message_max_bytes})"
            )
        return self

    @model_validator(mode="after")
    def _advertise_reachable(self) -> KafkaApiConfig:
        host = self.listen.rpartition(":")[0].strip("[]")
        if self.advertised is None and host in ("0.0.0.0", "::"):  # noqa: S104 - a check
            raise ValueError(
                "listen on every interface needs advertised: the address producers reach"
            )
        return self

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)

    @property
    def advertised_address(self) -> tuple[str, int] | None:
        """host:port from `advertised`, or None to advertise what the listener bound."""
        if self.advertised is None:
            return None
        host, _, port = self.advertised.rpartition(":")
        return host.strip("[]"), int(port)
