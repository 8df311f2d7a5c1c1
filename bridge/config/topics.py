"""What each topic lands as: its source, format, roll and retention."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from bridge.config.fields import Duration, Size, Strict, short
from bridge.config.registry import REGISTRY_FORMATS
from plateau_core.errors import InvalidInputError
from plateau_core.names import validate_topic
from plateau_core.policies import ConsolidatePolicy, IndexPolicy, RetentionPolicy, RollPolicy
from plateau_core.rollup import RollupPolicy, granularity_ms, rollup_metrics

FIELD_TYPES = ("string", "int", "float", "bool", "timestamp")


def _above_zero(value: float | None) -> float | None:
    # 0 would seal (or retire) everything at once; unset is how to ask for the default.
    if value is not None and value <= 0:
        raise ValueError("must be more than 0 (leave it out for the default)")
    return value


class RollConfig(Strict):
    max_rows: int | None = Field(
        default=None, ge=1, description="Seal when this many rows are buffered (1000000)."
    )
    max_bytes: Size | None = Field(
        default=None, description="Seal when this many bytes are buffered (64MiB)."
    )
    max_age: Duration | None = Field(
        default=None,
        description="Seal this long after the first buffered record arrived (10s): how fresh "
        "queries are.",
    )

    @field_validator("max_bytes", "max_age")
    @classmethod
    def _roll_above_zero(cls, value: float | None) -> float | None:
        return _above_zero(value)

    def apply(self, base: RollPolicy) -> RollPolicy:
        return RollPolicy(
            max_rows=self.max_rows or base.max_rows,
            max_bytes=self.max_bytes or base.max_bytes,
            max_age_s=self.max_age if self.max_age is not None else base.max_age_s,
        )


class RetentionConfig(Strict):
    max_bytes: Size | None = Field(
        default=None,
        description="Bytes of the topic's readable segments; those it retired stay on disk "
        "beyond it for storage.deletion_grace.",
    )
    max_age: Duration | None = Field(default=None, description="Age of a segment's newest record.")
    max_segments: int | None = Field(default=None, ge=1, description="Number of segments.")
    require_replicated: bool | None = Field(
        default=None,
        description="Keep segments not yet replicated (false), unless the store's hard "
        "limits force them out.",
    )

    @field_validator("max_bytes", "max_age")
    @classmethod
    def _retention_above_zero(cls, value: float | None) -> float | None:
        return _above_zero(value)

    def apply(self, base: RetentionPolicy) -> RetentionPolicy:
        return RetentionPolicy(
            max_bytes=self.max_bytes if self.max_bytes is not None else base.max_bytes,
            max_age_s=self.max_age if self.max_age is not None else base.max_age_s,
            max_segments=self.max_segments if self.max_segments is not None else base.max_segments,
            require_replicated=self.require_replicated
            if self.require_replicated is not None
            else base.require_replicated,
        )


class IndexConfig(Strict):
    bloom: list[str] = Field(
        default_factory=list,
        description="Columns whose values each segment keeps a bloom filter of (key and "
        "decoded string, binary or integer columns), so equality and IN queries skip "
        "segments without the value.",
    )
    fpp: float = Field(
        default=0.01,
        gt=0,
        lt=1,
        description="The filters' false positive rate: about 9.6 bits per distinct value at "
        "0.01; a false positive costs a segment read, never a row.",
    )

    @field_validator("bloom")
    @classmethod
    def _bloom(cls, value: list[str]) -> list[str]:
        for column in value:
            if column in ("offset", "timestamp", "partition"):
                raise ValueError(
                    f"{column!r} needs no bloom filter: segments are pruned by their "
                    "offset and time spans already"
                )
            if not column:
                raise ValueError("a column name must not be empty")
            stored_column("index.bloom", column)
        if len(set(value)) != len(value):
            raise ValueError(f"a column is listed twice: {value}")
        return value

    def policy(self) -> IndexPolicy:
        return IndexPolicy(bloom=tuple(self.bloom), fpp=self.fpp)


def stored_column(setting: str, column: str) -> str:
    """`column`, when a setting naming a topic's column may name it so. A decoded field
    named like one of plateau's columns in any case (`Key`, `Partition`) is stored with a
    `_` suffix (plateau_core.stored_names): named as the field, the setting would match
    nothing, silently."""
    # Imported here: the decoders' package imports this module.
    from plateau_core.stored_names import OWN, clashes  # noqa: PLC0415

    if clashes(column) and column not in OWN:
        stored = f"{column}_"
        raise ValueError(
            f"{setting} {column!r}: a decoded field named so is stored as {stored!r}, since "
            f"plateau's own columns take that name in any case; write {stored!r}"
        )
    return column


class ConsolidateConfig(Strict):
    target_bytes: Size = Field(
        default=64 * 1024 * 1024,
        description="Merge neighbouring small segments into segments of up to this size.",
    )
    min_age: Duration = Field(
        default=60.0,
        description="Only segments sealed at least this long ago (recent ones are the likeliest "
        "to be read while they are swapped).",
    )
    merge_below: Size = Field(
        default=8 * 1024 * 1024,
        description="Only segments smaller than this (or than target_bytes, if that is "
        "smaller) are merged. A partition busy enough to seal larger ones each second is read "
        "well enough as sealed, and rewriting its traffic would cost ingestion more than it "
        "saves readers (docs/storage.md).",
    )

    @field_validator("target_bytes", "merge_below")
    @classmethod
    def _sizes_above_zero(cls, value: int) -> int:
        _above_zero(value)
        return value

    def policy(self) -> ConsolidatePolicy:
        return ConsolidatePolicy(
            target_bytes=int(self.target_bytes),
            min_age_s=self.min_age,
            merge_below_bytes=int(self.merge_below),
        )


class RollupConfig(Strict):
    granularity: str = Field(
        description="The time bucket: 10s, 1m, 1h, 1d. The derived topic is "
        "{topic}.rollup.{granularity}, so a topic's rollups each have their own."
    )
    dimensions: list[str] = Field(
        default_factory=list, description="Columns the rows are grouped by within a bucket."
    )
    metrics: list[str] = Field(
        description="count, sum:<column>, min:<column>, max:<column>, distinct:<column> "
        "(an approximate distinct count, a mergeable sketch)."
    )
    retention: RetentionConfig = Field(
        default=RetentionConfig(),
        description="What the derived topic keeps (roll-ups usually outlive the raw rows); "
        "overrides defaults.retention.",
    )

    @model_validator(mode="after")
    def _valid(self) -> RollupConfig:
        try:
            policy = self.policy()
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None
        for dimension in policy.dimensions:
            stored_column("rollup dimension", dimension)
        for metric in policy.metrics:
            if metric.column is not None:
                stored_column(f"rollup metric {metric.kind} of", metric.column)
        return self

    def policy(self) -> RollupPolicy:
        return RollupPolicy(
            self.granularity,
            granularity_ms(self.granularity),
            tuple(self.dimensions),
            rollup_metrics(self.metrics),
        )


class Defaults(Strict):
    roll: RollConfig = Field(default=RollConfig(), description="When segments are sealed.")
    retention: RetentionConfig = Field(
        default=RetentionConfig(), description="What each topic keeps (none: no limit)."
    )


class TopicMapping(Strict):
    """A topic plateau stores: consumed from a Kafka cluster (`source`: a Kafka topic or
    `regex:<pattern>`, one plateau topic each), or produced to plateau's own Kafka API
    (no `source`: producers write to `name`)."""

    source: str | None = Field(
        default=None,
        description="A Kafka topic, or regex:<pattern> (also matches topics created later). "
        "Leave it out for a topic producers write to plateau directly (kafka_api).",
    )
    name: str | None = Field(
        default=None,
        description="The plateau topic (default: the source). For a regex, a template "
        "with {source}. Required without a source.",
    )
    partitions: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="Without a source: how many partitions producers see (default "
        "kafka_api.default_partitions); raised, serve opens the new ones at its next start, "
        "and a count never shrinks. A consumed topic has its Kafka topic's.",
    )
    format: Literal["raw", "json", "arrow", "avro", "protobuf", "json_schema"] = Field(
        default="raw",
        description="raw: value bytes; json: one object per message; arrow: an Arrow IPC "
        "stream of rows per message; avro, protobuf, json_schema: Confluent's wire format, "
        "schemas from schema_registry (docs/formats.md).",
    )
    key_format: Literal["raw", "avro", "protobuf", "json_schema"] = Field(
        default="raw",
        description="raw: the key as bytes only; avro, protobuf, json_schema: also decoded "
        "into the column key_decoded (needs key: keep).",
    )
    schema_: dict[str, str] | None = Field(
        default=None,
        alias="schema",
        description="json only: field -> string|int|float|bool|timestamp (a timestamp: ISO "
        "8601 text, or epoch ms between years 1 and 9999). Omitted: inferred and widened.",
    )
    timestamp: str = Field(
        default="kafka",
        description="kafka (the record's timestamp), log_append_time (when plateau received "
        "it; produced topics only) or field:<name> (a timestamp in the data, epoch ms between "
        "years 1 and 9999, or ISO 8601 text with a zone; anything else makes the record "
        "poison).",
    )
    key: Literal["keep", "drop"] = Field(default="keep", description="Keep the record key.")
    headers: Literal["keep", "drop"] = Field(default="keep", description="Keep the record headers.")
    roll: RollConfig = Field(default=RollConfig(), description="Overrides defaults.roll.")
    retention: RetentionConfig = Field(
        default=RetentionConfig(), description="Overrides defaults.retention."
    )
    index: IndexConfig = Field(
        default=IndexConfig(),
        description="Per-segment indexes beyond the promoted statistics every segment has.",
    )
    consolidate: ConsolidateConfig | None = Field(
        default=None,
        description="Merge runs of small sealed segments (what a short roll.max_age leaves) "
        "in the background. Left out: a consumed topic keeps its segments as sealed; a "
        "produced topic (no source), which seals every second, is merged with these "
        "defaults. false turns it off.",
    )
    rollups: list[RollupConfig] = Field(
        default_factory=list,
        description="Aggregates maintained as each segment seals, exactly once with the raw "
        "rows, into derived topics queried like any other.",
    )
    on_error: Literal["dlq", "skip", "fail"] = Field(
        default="fail",
        description="A record that does not decode: send to dlq, skip (logged), or fail "
        "(a consume worker stops before it; a produce request is refused with INVALID_RECORD).",
    )
    dlq: str | None = Field(
        default=None,
        description="Dead-letter topic for on_error: dlq, original bytes kept: a Kafka topic "
        "for a consumed topic, a topic of the store for a produced one.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("source")
    @classmethod
    def _source(cls, value: str | None) -> str | None:
        if value is None:
            return None
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
        if value not in ("kafka", "log_append_time") and not (
            value.startswith("field:") and len(value) > 6
        ):
            raise ValueError("timestamp must be 'kafka', 'log_append_time' or 'field:<name>'")
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
        if self.source is None:
            self._check_produced()
        elif self.partitions is not None:
            raise ValueError("partitions applies to produced topics (no source) only")
        elif self.timestamp == "log_append_time":
            raise ValueError(
                "timestamp: log_append_time applies to produced topics (no source) only; a "
                "consumed topic takes Kafka's own timestamp type"
            )
        if self.name is not None:
            # With the shortest Kafka topic for {source}: a template that is too long even
            # then, or that escapes its folder, is refused here rather than when a topic
            # matches (a longer matching topic is refused by the worker, naming this key).
            template = self.name.replace("{source}", "x")
            try:
                validate_topic(template)
            except ValueError as exc:
                raise ValueError(f"name {short(self.name)}: {exc}") from None
            if self.is_regex and "{source}" not in self.name:
                raise ValueError(
                    "a regex mapping lands each matching topic separately: its name must "
                    "contain {source} (or be left out)"
                )
        if self.on_error == "dlq" and not self.dlq:
            raise ValueError("on_error: dlq needs a dlq topic")
        if self.dlq is not None:
            try:
                validate_topic(self.dlq)
            except ValueError as exc:
                raise ValueError(f"dlq {short(self.dlq)}: {exc}") from None
        if self.schema_ is not None and self.format != "json":
            raise ValueError("schema applies to format: json only")
        labels = [r.granularity for r in self.rollups]
        for label in sorted({g for g in labels if labels.count(g) > 1}):
            # Both would seal into {topic}.rollup.{label} at the same offsets: every seal of
            # the topic conflicted with itself.
            raise ValueError(
                f"two rollups of granularity {label} would both be {{topic}}.rollup.{label}; "
                "merge their metrics into one (with the dimensions of both), or give one "
                "another granularity"
            )
        self._check_key_format()
        if self.timestamp.startswith("field:") and self.format == "raw":
            raise ValueError("timestamp: field:<name> needs a format with fields (not raw)")
        return self

    @property
    def uses_registry(self) -> bool:
        """Values or keys carry schema ids to look up in the schema registry."""
        return self.format in REGISTRY_FORMATS or self.key_format in REGISTRY_FORMATS

    def _check_key_format(self) -> None:
        if self.key_format == "raw":
            return
        if self.key == "drop":
            raise ValueError("key_format decodes the key: it needs key: keep")
        if self.format in ("json", "arrow"):
            raise ValueError(
                "key_format goes with a raw, avro, protobuf or json_schema format, not "
                f"{self.format}"
            )

    def _check_produced(self) -> None:
        if self.name is None:
            raise ValueError("a topic without a source needs a name (what producers write to)")
        if "{source}" in self.name:
            raise ValueError("a topic without a source has no {source} to put in its name")

    @field_validator("consolidate", mode="before")
    @classmethod
    def _consolidate_off(cls, value: object) -> object:
        return None if value is False else value

    @property
    def consolidation(self) -> ConsolidateConfig | None:
        """What merges the topic's small segments: `consolidate` as configured; a produced
        topic that does not say gets the defaults. Its partitions seal every second (86,400
        segments a day each, a file to open and a manifest row to plan over for every
        read), and that second is plateau's choice, for freshness, not the user's."""
        if (
            self.consolidate is None
            and self.produced
            and "consolidate" not in self.model_fields_set
        ):
            return ConsolidateConfig()
        return self.consolidate

    def rollup_policies(self) -> tuple[RollupPolicy, ...]:
        return tuple(r.policy() for r in self.rollups)

    @property
    def produced(self) -> bool:
        """Written by producers to plateau's Kafka API, not consumed from a cluster."""
        return self.source is None

    @property
    def is_regex(self) -> bool:
        return self.source is not None and self.source.startswith("regex:")

    def matches(self, topic: str) -> bool:
        if self.source is None:
            return False
        if self.is_regex:
            return re.fullmatch(self.source.removeprefix("regex:"), topic) is not None
        return topic == self.source

    def plateau_topic(self, source_topic: str) -> str:
        if self.name is None:
            return source_topic
        return self.name.replace("{source}", source_topic)

    @property
    def topic(self) -> str | None:
        """The plateau topic of an exact mapping (a regex lands many: None)."""
        return None if self.is_regex else (self.name or self.source)
