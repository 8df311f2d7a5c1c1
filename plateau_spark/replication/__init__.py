"""Replication of sealed segments to Parquet files or Iceberg tables, on object storage or a
local folder."""

from plateau_spark.replication.files import ReplicaFile, ReplicaTask, replica_name, write_task
from plateau_spark.replication.iceberg_catalog import IcebergSettings
from plateau_spark.replication.iceberg_job import IcebergReplicator
from plateau_spark.replication.iceberg_schema import SchemaConflictError
from plateau_spark.replication.job import (
    ReplicationBusyError,
    ReplicationReport,
    Replicator,
)
from plateau_spark.replication.target import S3Settings, Target, TargetError

__all__ = [
    "IcebergReplicator",
    "IcebergSettings",
    "ReplicaFile",
    "ReplicaTask",
    "ReplicationBusyError",
    "ReplicationReport",
    "Replicator",
    "S3Settings",
    "SchemaConflictError",
    "Target",
    "TargetError",
    "replica_name",
    "write_task",
]
