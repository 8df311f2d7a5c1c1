"""The configuration file's shape: pydantic models, validated when loaded.

Every model forbids unknown keys except `kafka`, whose extra keys are librdkafka properties
passed through unchanged (security.protocol, sasl.*, ssl.*, ...).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from bridge.config.units import parse_duration, parse_size
from plateau_core import RetentionPolicy, RollPolicy
from plateau_core.names import validate_topic

Size = Annotated[int, BeforeValidator(parse_size)]
Duration = Annotated[float, BeforeValidator(parse_duration)]

MiB = 1024 * 1024
FIELD_TYPES = ("string", "int", "float", "bool", "timestamp")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaConfig(BaseModel):
    """Where the producers' Kafka is. Extra keys go to librdkafka as they are."""

    model_config = ConfigDict(extra="allow", frozen=True)

    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str = "plateau"
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    poll_batch: int = Field(default=10_000, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _check_passthrough(self) -> KafkaConfig:
        for key, value in (self.model_extra or {}).items():
            if not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9_]+)+", key):
                raise ValueError(
                    f"unknown key {key!r}: not a field of kafka and not a librdkafka "
                    "property name (like security.protocol)"
                )
            if not isinstance(value, str | int | float | bool):
                raise ValueError(f"librdkafka property {key!r} must be a scalar, got {value!r}")
        return self

    def librdkafka(self) -> dict[str, str]:
        """The passthrough properties, stringified as librdkafka wants them."""
        out: dict[str, str] = {}
        for key, value in (self.model_extra or {}).items():
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


class StorageConfig(Strict):
    data_dir: Path = Path("data")
    manifest_url: str | None = None
    max_bytes: Size | None = None
    min_free_disk: Size | None = None
    memory_budget: Size = 512 * MiB
    writer_threads: int = Field(default=4, ge=1, le=64)
    compression: Literal["lz4", "zstd", "none"] = "lz4"
    deletion_grace: Duration = 300.0
    retention_interval: Duration = 30.0


class RollConfig(Strict):
    max_rows: int | None = Field(default=None, ge=1)
    max_bytes: Size | None = None
    max_age: Duration | None = None

    def apply(self, base: RollPolicy) -> RollPolicy:
        return RollPolicy(
            max_rows=self.max_rows or base.max_rows,
            max_bytes=self.max_bytes or base.max_bytes,
            max_age_s=self.max_age if self.max_age is not None else base.max_age_s,
        )


class RetentionConfig(Strict):
    max_bytes: Size | None = None
    max_age: Duration | None = None
    max_segments: int | None = Field(default=None, ge=1)
    require_replicated: bool | None = None

    def apply(self, base: RetentionPolicy) -> RetentionPolicy:
        return RetentionPolicy(
            max_bytes=self.max_bytes if self.max_bytes is not None else base.max_bytes,
            max_age_s=self.max_age if self.max_age is not None else base.max_age_s,
            max_segments=self.max_segments if self.max_segments is not None else base.max_segments,
            require_replicated=self.require_replicated
            if self.require_replicated is not None
            else base.require_replicated,
        )


class Defaults(Strict):
    roll: RollConfig = RollConfig()
    retention: RetentionConfig = RetentionConfig()


class TopicMapping(Strict):
    """One source (a Kafka topic or `regex:<pattern>`) landed as one plateau topic each."""

    source: str
    name: str | None = None
    format: Literal["raw", "json", "arrow"] = "raw"
    schema_: dict[str, str] | None = Field(default=None, alias="schema")
    timestamp: str = "kafka"
    key: Literal["keep", "drop"] = "keep"
    headers: Literal["keep", "drop"] = "keep"
    roll: RollConfig = RollConfig()
    retention: RetentionConfig = RetentionConfig()
    on_error: Literal["dlq", "skip", "fail"] = "fail"
    dlq: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if value.startswith("regex:"):
            pattern = value.removeprefix("regex:")
            if not pattern:
                raise ValueError("regex: needs a pattern")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad regex {pattern!r}: {exc}") from None
            return value
        validate_topic(value)
        return value

    @field_validator("timestamp")
    @classmethod
    def _timestamp(cls, value: str) -> str:
        if value != "kafka" and not (value.startswith("field:") and len(value) > 6):
            raise ValueError("timestamp must be 'kafka' or 'field:<name>'")
        return value

    @field_validator("schema_")
    @classmethod
    def _schema(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for field, kind in (value or {}).items():
            if kind not in FIELD_TYPES:
                raise ValueError(
                    f"field {field!r} has type {kind!r}; types are {', '.join(FIELD_TYPES)}"
                )
            if field in ("offset", "timestamp", "key", "headers"):
                raise ValueError(f"field {field!r} would shadow plateau's own column")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TopicMapping:
        if self.name is not None:
            template = self.name.replace("{source}", "x")
            validate_topic(template)
            if self.is_regex and "{source}" not in self.name:
                raise ValueError(
                    "a regex mapping lands each matching topic separately: its name must "
                    "contain {source} (or be left out)"
                )
        if self.on_error == "dlq" and not self.dlq:
            raise ValueError("on_error: dlq needs a dlq topic")
        if self.dlq is not None:
            validate_topic(self.dlq)
        if self.schema_ is not None and self.format != "json":
            raise ValueError("schema applies to format: json only")
        if self.timestamp.startswith("field:") and self.format == "raw":
            raise ValueError("timestamp: field:<name> needs a json or arrow format")
        return self

    @property
    def is_regex(self) -> bool:
        return self.source.startswith("regex:")

    def matches(self, topic: str) -> bool:
        if self.is_regex:
            return re.fullmatch(self.source.removeprefix("regex:"), topic) is not None
        return topic == self.source

    def plateau_topic(self, source_topic: str) -> str:
        if self.name is None:
            return source_topic
        return self.name.replace("{source}", source_topic)


class MetricsConfig(Strict):
    address: str = "127.0.0.1:9108"
    enabled: bool = True


class Config(Strict):
    kafka: KafkaConfig = KafkaConfig()
    storage: StorageConfig = StorageConfig()
    defaults: Defaults = Defaults()
    topics: list[TopicMapping] = Field(min_length=1)
    metrics: MetricsConfig = MetricsConfig()
    shutdown_timeout: Duration = 30.0

    @model_validator(mode="after")
    def _unique(self) -> Config:
        names = [t.name or t.source for t in self.topics if not t.is_regex]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"several mappings land in the same plateau topic: {dupes}")
        sources = [t.source for t in self.topics]
        repeated = sorted({s for s in sources if sources.count(s) > 1})
        if repeated:
            raise ValueError(f"source listed twice: {repeated}")
        return self

    def mapping_for(self, source_topic: str) -> TopicMapping | None:
        """The first mapping that matches (exact names before regexes)."""
        for mapping in sorted(self.topics, key=lambda t: t.is_regex):
            if mapping.matches(source_topic):
                return mapping
        return None

    def mapping_for_plateau_topic(self, topic: str) -> TopicMapping | None:
        """The mapping that lands into plateau topic `topic`, if any."""
        found = self.source_of(topic)
        return None if found is None else found[0]

    def source_of(self, topic: str) -> tuple[TopicMapping, str] | None:
        """(mapping, Kafka source topic) of plateau topic `topic`, if a mapping lands there."""
        for mapping in sorted(self.topics, key=lambda t: t.is_regex):
            if not mapping.is_regex:
                if (mapping.name or mapping.source) == topic:
                    return mapping, mapping.source
                continue
            prefix, _, suffix = (mapping.name or "{source}").partition("{source}")
            if topic.startswith(prefix) and topic.endswith(suffix):
                source = topic[len(prefix) : len(topic) - len(suffix)]
                if source and mapping.matches(source):
                    return mapping, source
        return None

    def roll_policy(self, mapping: TopicMapping) -> RollPolicy:
        return mapping.roll.apply(self.defaults.roll.apply(RollPolicy()))

    def retention_policy(self, mapping: TopicMapping) -> RetentionPolicy:
        return mapping.retention.apply(self.defaults.retention.apply(RetentionPolicy()))

    def redacted(self) -> dict[str, Any]:
        """The config as a dict with secrets masked, for logs and `check` output."""
        data = self.model_dump(mode="json", by_alias=True)
        for key in list(data["kafka"]):
            if any(word in key for word in ("password", "secret", "token", "key")):
                data["kafka"][key] = "***"
        return data
