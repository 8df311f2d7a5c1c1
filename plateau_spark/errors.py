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
    """A produced topic's replica was written by another store (or by this data folder
    before it was created again): the topic is not replicated there. The other topics of the
    run were; `refused` maps each refused topic to its reason."""

    def __init__(self, refused: dict[str, str]) -> None:
        super().__init__("; ".join(refused[topic] for topic in sorted(refused)))
        self.refused = dict(refused)
