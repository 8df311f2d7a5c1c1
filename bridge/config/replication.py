"""The configuration of `plateau replicate` and `plateau query`: the replica's target and
format, S3, Iceberg's catalog, and the Spark session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, field_validator

from bridge.config.fields import Duration, MiB, Size, Strict
from plateau_core.names import validate_topic

if TYPE_CHECKING:
    from plateau_spark.replication.target import S3Settings


class S3Config(Strict):
    endpoint_url: str | None = Field(
        default=None,
        description="S3-compatible endpoint (http://minio:9000); default AWS, or "
        "$AWS_ENDPOINT_URL.",
    )
    region: str | None = Field(
        default=None, description="Bucket region; default $AWS_REGION, then us-east-1."
    )
    access_key_id: str | None = Field(
        default=None, description="Default $AWS_ACCESS_KEY_ID (or the AWS credential chain)."
    )
    secret_access_key: SecretStr | None = Field(
        default=None,
        description="Default $AWS_SECRET_ACCESS_KEY; prefer "
        "PLATEAU__REPLICATION__S3__SECRET_ACCESS_KEY to the file.",
    )
    session_token: SecretStr | None = Field(default=None, description="Default $AWS_SESSION_TOKEN.")

    def settings(self) -> S3Settings:
        # Imported here: loading a configuration must not load the replication job.
        from plateau_spark.replication.target import S3Settings  # noqa: PLC0415

        return S3Settings(
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.access_key_id,
            secret_access_key=_secret(self.secret_access_key),
            session_token=_secret(self.session_token),
        )


def _secret(value: SecretStr | None) -> str | None:
    return None if value is None else value.get_secret_value()


class IcebergConfig(Strict):
    catalog_uri: str | None = Field(
        default=None,
        description="The Iceberg catalog: a SQLAlchemy URL (sqlite:///path, "
        "postgresql+psycopg2://user@host/db) for a SQL catalog, or http(s)://host/path for a "
        "REST catalog. Default: a SQLite catalog beside the store "
        "(data_dir/iceberg_catalog.db).",
    )
    catalog_name: str = Field(
        default="plateau",
        min_length=1,
        description="The catalog's name (a SQL catalog keeps several apart by it).",
    )
    namespace: str = Field(
        default="plateau",
        pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$",
        description="Namespace of the tables (dots separate levels); one table per topic, "
        "named as the topic.",
    )
    commit_retries: int = Field(
        default=4,
        ge=0,
        le=100,
        description="Retries of a commit that another writer's commit got ahead of.",
    )
    small_file_size: Size = Field(
        default=32 * MiB,
        description="`plateau replicate --compact` rewrites data files below this size, per "
        "day and Kafka partition, into files of about replication.file_size.",
    )
    snapshot_retention: Duration = Field(
        default=7 * 86_400.0,
        description="`plateau replicate --compact` expires snapshots older than this (the "
        "newest min_snapshots are kept whatever their age) and deletes the files only they "
        "referenced.",
    )
    min_snapshots: int = Field(
        default=10, ge=1, description="Snapshots kept by --compact whatever their age."
    )


class ReplicationConfig(Strict):
    target: str | None = Field(
        default=None,
        description="s3://bucket/prefix, file:///path or a folder (relative to the config "
        "file). `plateau replicate --target` overrides it. With format iceberg: the "
        "warehouse, under which each table has its folder.",
    )
    format: Literal["parquet", "iceberg"] = Field(
        default="parquet",
        description="parquet: files in plateau's own layout (date=/partition= folders); "
        "iceberg: one Apache Iceberg table per topic, committed exactly once per run.",
    )
    interval: Duration = Field(
        default=60.0,
        gt=0,
        description="Pause between runs of `plateau replicate` without --once.",
    )
    file_size: Size = Field(
        default=128 * MiB,
        description="Neighbouring segments are merged into Parquet files of about this size.",
    )
    compression: Literal["zstd", "snappy", "lz4", "gzip", "none"] = Field(
        default="zstd",
        description="Parquet compression of the replicas (the Parquet files and the Iceberg "
        "tables' data files).",
    )
    topics: list[str] | None = Field(
        default=None, description="plateau topics to replicate (default: all)."
    )
    s3: S3Config = Field(default=S3Config(), description="Connection to s3:// targets.")
    iceberg: IcebergConfig = Field(
        default=IcebergConfig(), description="Iceberg tables (format: iceberg)."
    )

    @field_validator("topics")
    @classmethod
    def _topics(cls, value: list[str] | None) -> list[str] | None:
        for topic in value or []:
            validate_topic(topic)
        return value


class SparkConfig(Strict):
    master: str | None = Field(
        default=None,
        description="spark://, yarn, k8s:// or local[N]; default $PLATEAU_SPARK_MASTER, "
        "then local[*]. --master overrides it.",
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Spark settings for query and replicate (spark.executor.memory: 4g, ...). A "
            "spark.jars given here is kept; the connector's jars are added to it."
        ),
    )
