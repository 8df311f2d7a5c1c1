"""Errors of the Spark jobs; each is a PlateauError, so the command line reports it."""

from __future__ import annotations

from plateau_core.errors import PlateauError


class SparkJobError(PlateauError):
    """A Spark job (query, replication) could not run or failed."""


class QueryError(SparkJobError):
    """The SQL was refused by Spark (its message says why)."""


class ReplicationFailedError(SparkJobError):
    """A replication run failed; nothing of what failed was recorded, the next run redoes
    it."""


class ReplicaOwnerError(SparkJobError):
    """A topic's replica is not this store's to write: a produced topic's replica fed by
    another store (or by this data folder before it was created again), or an Iceberg table
    folder the catalog does not list. The topic is not replicated there; the run's other
    topics were. `refused` maps each refused topic to why."""

    def __init__(self, refused: dict[str, str]) -> None:
        super().__init__("; ".join(refused[topic] for topic in sorted(refused)))
        self.refused = dict(refused)


class TopicReplicationError(SparkJobError):
    """Replicating some topics failed in a way no other error of this module names (a
    column type the target refused, a bug): each was held back, nothing of it recorded, and
    the run's other topics were replicated. `failed` maps each such topic to its error."""

    def __init__(self, failed: dict[str, str], others: dict[str, str] | None = None) -> None:
        problems = {**(others or {}), **failed}
        super().__init__("; ".join(problems[topic] for topic in sorted(problems)))
        self.failed = dict(failed)
