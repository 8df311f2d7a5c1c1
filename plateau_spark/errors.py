"""Errors of the Spark jobs; each is a PlateauError, so the command line reports it."""

from __future__ import annotations

from plateau_core.errors import PlateauError


class SparkJobError(PlateauError):
    """A Spark job (query, replication) could not run or failed."""


class QueryError(SparkJobError):
    """The SQL was refused by Spark (its message says why)."""


class ReplicationFailedError(SparkJobError):
    """A replication run failed; nothing of it was recorded, the next run redoes it."""
