"""Replication of sealed segments to Parquet on object storage or a local folder."""

from plateau_spark.replication.files import ReplicaFile, ReplicaTask, replica_name, write_task
from plateau_spark.replication.job import (
    ReplicationBusyError,
    ReplicationReport,
    Replicator,
)
from plateau_spark.replication.target import S3Settings, Target, TargetError

__all__ = [
    "ReplicaFile",
    "ReplicaTask",
    "ReplicationBusyError",
    "ReplicationReport",
    "Replicator",
    "S3Settings",
    "Target",
    "TargetError",
    "replica_name",
    "write_task",
]
