"""The configuration file's shape: pydantic models, validated when loaded.

Every model forbids unknown keys except `kafka`, whose extra keys are librdkafka properties
passed through unchanged (security.protocol, sasl.*, ssl.*, ...).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bridge.config.fields import Duration, MiB, Size, Strict
from bridge.config.kafka_api import KafkaApiConfig
from bridge.config.registry import SchemaRegistryConfig
from bridge.config.replication import ReplicationConfig, SparkConfig
from bridge.config.topics import ConsolidateConfig, Defaults, RollupConfig, TopicMapping
from plateau_core.policies import RetentionPolicy, RollPolicy

# The only assignor of librdkafka's classic group protocol that assigns incrementally.
COOPERATIVE = "cooperative-sticky"


class KafkaConfig(BaseModel):
    """Where the producers' Kafka is. Extra keys go to librdkafka as they are."""

    model_config = ConfigDict(extra="allow", frozen=True)

    bootstrap_servers: str = Field(
        default="127.0.0.1:9092", description="Comma-separated host:port list of brokers."
    )
    group_id: str = Field(
        default="plateau",
        description="Consumer group; every worker of every node of one deployment shares it.",
    )
    auto_offset_reset: Literal["earliest", "latest"] = Field(
        default="earliest",
        description="Where a partition plateau has never stored starts. Once stored, the "
        "manifest's watermark decides.",
    )
    start_without_watermark: Literal["reset", "committed"] = Field(
        default="reset",
        description="A partition this store has no watermark for starts at auto_offset_reset "
        "(reset) or at the group's committed offset (committed: for partitions moving between "
        "nodes).",
    )
    isolation_level: Literal["read_committed", "read_uncommitted"] = Field(
        default="read_committed",
        description="read_committed: records of aborted transactions never land.",
    )
    poll_batch: int = Field(
        default=10_000, ge=1, le=1_000_000, description="Messages fetched per poll, at most."
    )

    @model_validator(mode="after")
    def _check_passthrough(self) -> KafkaConfig:
        for key, value in (self.model_extra or {}).items():
            if not re.fullmatch(r"[a-z0-9]+(\.[a-z0-9_]+)+", key):
                raise ValueError(
                    f"unknown key {key!r}: not a field of kafka and not a librdkafka "
                    "property name (like security.protocol)"
                )
            if not isinstance(value, str | int | float | bool):
                # The type only: the value may be a password.
                raise ValueError(
                    f"librdkafka property {key!r} must be a scalar (text, a number or a "
                    f"boolean), got a {type(value).__name__}"
                )
        strategy = (self.model_extra or {}).get("partition.assignment.strategy")
        if strategy is not None and str(strategy).strip() != COOPERATIVE:
            # librdkafka refuses the workers' incremental assignments under an eager
            # assignor, and only in its own log: nothing would be consumed.
            raise ValueError(
                f"partition.assignment.strategy {strategy!r}: plateau's workers hand "
                "partitions over incrementally (sealing and committing only those revoked), "
                f"so only {COOPERATIVE} is supported; leave it out"
            )
        return self

    def librdkafka(self) -> dict[str, str]:
        """The passthrough properties, stringified as librdkafka wants them."""
        out: dict[str, str] = {}
        for key, value in (self.model_extra or {}).items():
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


class StorageConfig(Strict):
    data_dir: Path = Field(
        default=Path("data"),
        description="Segments and the default manifest; relative to the config file.",
    )
    manifest_url: str | None = Field(
        default=None,
        description=(
            "SQLAlchemy URL of the manifest; default SQLite at data_dir/manifest.db. "
            "PostgreSQL (postgresql://user@host:port/db) needs plateau[postgres]; Spark's "
            "plateau connector (query, replicate) reaches it over TCP."
        ),
    )
    max_bytes: Size | None = Field(
        default=None,
        description="Footprint of the whole store: its readable segments plus the manifest "
        "(the Kafka API's journal is beside it, see kafka_api.journal_max_bytes). Segments "
        "retention retired or consolidation replaced stay on disk beyond it for "
        "deletion_grace: give the disk max_bytes plus what is retired in one deletion_grace.",
    )
    min_free_disk: Size | None = Field(
        default=None,
        description="Free disk to keep: retention deletes below it, ingestion pauses, and "
        "consolidation merges only what fits above it. Retention counts segments waiting out "
        "deletion_grace as freed already; ingestion resumes once their files go.",
    )
    memory_budget: Size = Field(
        default=512 * MiB,
        description="Bytes buffered plus being written, over all partitions of a worker.",
    )
    writer_threads: int = Field(
        default=4, ge=1, le=64, description="Threads sealing segments, shared by all partitions."
    )
    compression: Literal["lz4", "zstd", "none"] = Field(
        default="lz4", description="Arrow IPC compression of segment files."
    )
    compression_adaptive: bool = Field(
        default=True,
        description="Write a partition's segments uncompressed while `compression` saves "
        "less than 5% of its data (encrypted, random or producer-compressed values), where "
        "the codec's CPU buys nothing; decided on samples of 1 MiB of compressed seals. An "
        "uncompressed partition is compressed for a new sample after 32 MiB or 60 s, and "
        "stays compressed if that saves 5%. false: always compress (docs/storage.md).",
    )
    deletion_grace: Duration = Field(
        default=300.0,
        description="How long a segment retention removed (or consolidation replaced) stays "
        "on disk for running readers, beyond storage.max_bytes.",
    )
    retention_interval: Duration = Field(
        default=30.0, description="How often retention runs while serving."
    )
    consolidate_interval: Duration = Field(
        default=30.0,
        description="How often each writer consolidates the partitions it owns (topics with "
        "consolidate set).",
    )
    consolidate_max_rate: Size | None = Field(
        default=32 * MiB,
        description="Bytes a second each writer's consolidation rewrites at most, on average "
        "(each consume worker's and the Kafka API's: a merge reads and writes its run's "
        "bytes again beside ingestion). Unpaced, a pass after a busy minute took the cores "
        "and the disk in a burst and halved the produce rate meanwhile (docs/storage.md). "
        "null: as fast as it goes.",
    )

    @field_validator("consolidate_max_rate", mode="before")
    @classmethod
    def _per_second(cls, value: object) -> object:
        # "32MiB/s" reads as what it is; the rate is a size a second either way.
        if isinstance(value, str) and value.strip().lower().endswith("/s"):
            return value.strip()[:-2].strip()
        return value

    @field_validator("consolidate_max_rate")
    @classmethod
    def _positive_rate(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("must be more than 0 bytes a second (null: unpaced)")
        return value

    verify_on_start: bool = Field(
        default=True,
        description="Check every segment's checksums once when serve starts, before its "
        "workers, quarantining bad ones: reads the whole store, so start-up takes about "
        "its size divided by the disk's read speed (seconds per GiB from a cold disk).",
    )


class MetricsConfig(Strict):
    enabled: bool = Field(
        default=True, description="Serve /metrics, /healthz and /readyz while `plateau serve` runs."
    )
    listen: str = Field(
        default="127.0.0.1:9108",
        description="host:port of the metrics and health endpoint. Loopback by default; "
        "0.0.0.0:9108 exposes it (inside a container, say); port 0 takes a free one (logged).",
    )
    stall_after: Duration = Field(
        default=120.0,
        description="An assigned partition with records waiting in Kafka and no progress for "
        "this long turns /readyz red and is logged as stalled.",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"listen must be host:port (like 127.0.0.1:9108), got {value!r}")
        return value

    @model_validator(mode="after")
    def _positive(self) -> MetricsConfig:
        if self.stall_after <= 0:
            raise ValueError("stall_after must be more than 0")
        return self

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


class Config(Strict):
    kafka: KafkaConfig = Field(default=KafkaConfig(), description="The Kafka cluster.")
    storage: StorageConfig = Field(default=StorageConfig(), description="The local store.")
    defaults: Defaults = Field(default=Defaults(), description="Roll and retention for all topics.")
    topics: list[TopicMapping] = Field(min_length=1, description="What to land, and how.")
    replication: ReplicationConfig = Field(
        default=ReplicationConfig(),
        description="Copies of sealed segments as Parquet files or Iceberg tables.",
    )
    spark: SparkConfig = Field(default=SparkConfig(), description="Spark for query and replicate.")
    metrics: MetricsConfig = Field(
        default=MetricsConfig(), description="Prometheus metrics and health checks of serve."
    )
    kafka_api: KafkaApiConfig | None = Field(
        default=None,
        description="plateau's own Kafka protocol listener, for producers to write to "
        "directly; off when absent.",
    )
    schema_registry: SchemaRegistryConfig | None = Field(
        default=None,
        description="The schema registry of the avro, protobuf and json_schema formats.",
    )
    shutdown_timeout: Duration = Field(
        default=30.0, description="Deadline to seal, commit and close on SIGTERM or a revoke."
    )

    @model_validator(mode="after")
    def _unique(self) -> Config:
        names = [t.topic for t in self.topics if t.topic is not None]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"several mappings land in the same plateau topic: {dupes}")
        sources = [t.source for t in self.topics if t.source is not None]
        repeated = sorted({s for s in sources if sources.count(s) > 1})
        if repeated:
            raise ValueError(f"source listed twice: {repeated}")
        needing = [t.topic or t.source for t in self.topics if t.uses_registry]
        if needing and self.schema_registry is None:
            raise ValueError(
                f"topics {needing} use a schema-registry format (avro, protobuf, json_schema); "
                "add a schema_registry section with its url"
            )
        for mapping in self.topics:
            # A roll-up topic is written by its topic's seals: records landing in it too take
            # the offsets of the roll-up's segments, in the same folder, and overwrite them.
            landing = [] if mapping.topic is None else [(f"{mapping.topic!r}", mapping.topic)]
            if mapping.produced and mapping.dlq is not None:  # a store topic then
                landing.append((f"dlq {mapping.dlq!r} of topic {mapping.name!r}", mapping.dlq))
            for said, topic in landing:
                derived = self.rollup_of(topic)
                if derived is not None:
                    base = topic.rpartition(".rollup.")[0]
                    raise ValueError(
                        f"{said} is the {derived[1].granularity} roll-up of topic {base!r}; "
                        "give it another name"
                    )
        self._no_dead_letter_loop()
        produced = [t.name for t in self.topics if t.produced]
        if produced and self.kafka_api is None:
            raise ValueError(
                f"topics {produced} have no source, so producers write them to plateau's "
                "Kafka API; add a kafka_api section to enable it"
            )
        return self

    def _no_dead_letter_loop(self) -> None:
        """A consumed topic's dead letters go to a Kafka topic; when a mapping consuming that
        topic can refuse them again (it decodes, and sends what fails to a dlq) and its
        dead letters come back round, a poison record is sent again and again for good."""
        for start in self.consumed:
            if start.on_error != "dlq" or start.dlq is None or start.source is None:
                continue
            path = [start.source]
            dlq: str | None = start.dlq
            while dlq is not None:
                consumer = self.mapping_for(dlq)
                if consumer is None or consumer.produced or not _refuses(consumer):
                    break
                if dlq in path:
                    hops = " -> ".join([*path, dlq])
                    raise ValueError(
                        f"dead letters would go round for good ({hops}): topic {dlq!r} is "
                        f"consumed by mapping {consumer.source!r}, which decodes it and sends "
                        "what fails to its own dlq; give the dlq a topic no mapping consumes, "
                        "or consume it with format: raw"
                    )
                path.append(dlq)
                dlq = consumer.dlq

    @property
    def consumed(self) -> list[TopicMapping]:
        """The mappings consumed from the Kafka cluster."""
        return [t for t in self.topics if not t.produced]

    @property
    def produced(self) -> list[TopicMapping]:
        """The topics producers write to plateau's Kafka API."""
        return [t for t in self.topics if t.produced]

    def mapping_for(self, source_topic: str) -> TopicMapping | None:
        """The first mapping that matches (exact names before regexes)."""
        for mapping in sorted(self.topics, key=lambda t: t.is_regex):
            if mapping.matches(source_topic):
                return mapping
        return None

    def mapping_for_plateau_topic(self, topic: str) -> TopicMapping | None:
        """The mapping that lands into plateau topic `topic`, consumed or produced, if any."""
        for mapping in self.produced:
            if mapping.name == topic:
                return mapping
        found = self.source_of(topic)
        return None if found is None else found[0]

    def source_of(self, topic: str) -> tuple[TopicMapping, str] | None:
        """(mapping, Kafka source topic) of plateau topic `topic`, if a mapping consumes into
        it."""
        for mapping in sorted(self.consumed, key=lambda t: t.is_regex):
            if mapping.source is None:
                continue
            if not mapping.is_regex:
                if mapping.topic == topic:
                    return mapping, mapping.source
                continue
            prefix, _, suffix = (mapping.name or "{source}").partition("{source}")
            if topic.startswith(prefix) and topic.endswith(suffix):
                source = topic[len(prefix) : len(topic) - len(suffix)]
                if source and mapping.matches(source):
                    return mapping, source
        return None

    def consolidation(self, topic: str, *, produced: bool = False) -> ConsolidateConfig | None:
        """What merges `topic`'s small segments: its mapping's (a roll-up topic's: its raw
        topic's). A topic no mapping names that producers created (`produced`:
        kafka_api.auto_create_topics) is merged as a produced topic that does not say."""
        derived = self.rollup_of(topic)
        mapping = derived[0] if derived is not None else self.mapping_for_plateau_topic(topic)
        if mapping is None:
            return ConsolidateConfig() if produced else None
        return mapping.consolidation

    def roll_policy(self, mapping: TopicMapping) -> RollPolicy:
        return mapping.roll.apply(self.defaults.roll.apply(RollPolicy()))

    def retention_policy(self, mapping: TopicMapping) -> RetentionPolicy:
        return mapping.retention.apply(self.defaults.retention.apply(RetentionPolicy()))

    def rollup_of(self, topic: str) -> tuple[TopicMapping, RollupConfig] | None:
        """(mapping of the raw topic, roll-up) when `topic` is a derived roll-up topic
        (`{topic}.rollup.{granularity}`) the config declares. Asked before
        mapping_for_plateau_topic: a regex mapping matches its own roll-up topics' names."""
        base, marker, label = topic.rpartition(".rollup.")
        mapping = self.mapping_for_plateau_topic(base) if marker else None
        if mapping is None:
            return None
        for rollup in mapping.rollups:
            if rollup.granularity == label:
                return mapping, rollup
        return None

    def rollup_retention(self, topic: str) -> RetentionPolicy | None:
        """The retention of a derived roll-up topic (`{topic}.rollup.{granularity}`), or None
        when `topic` is not one."""
        found = self.rollup_of(topic)
        if found is None:
            return None
        return found[1].retention.apply(self.defaults.retention.apply(RetentionPolicy()))

    def redacted(self) -> dict[str, Any]:
        """The config as a dict with secrets masked, for logs and `check` output."""
        data = self.model_dump(mode="json", by_alias=True)
        for key in list(data["kafka"]):
            if any(word in key for word in ("password", "secret", "token", "key")):
                data["kafka"][key] = "***"
        return data


def _refuses(mapping: TopicMapping) -> bool:
    """Whether a mapping can turn a record away to its dlq: it decodes values or keys."""
    return mapping.on_error == "dlq" and (mapping.format != "raw" or mapping.key_format != "raw")
