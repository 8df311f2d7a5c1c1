"""What a worker keeps per assigned partition, and its running counts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from plateau_core import REFUSAL_REASONS, RefusalReason

# Why a partition is paused: the writer refused an append, or the schema registry cannot be
# asked. Metric labels and log fields: the values do not change.
PauseReason = RefusalReason | Literal["schema_registry"]
PAUSE_REASONS: tuple[PauseReason, ...] = (*REFUSAL_REASONS, "schema_registry")


@dataclass
class PartitionState:
    """One assigned partition, keyed by (source topic, partition) in the worker."""

    plateau_topic: str
    next_offset: int  # the next offset to append; earlier ones are duplicates of a re-fetch
    # next_offset is where the partition continues: False for one without a watermark until
    # its first records come (it starts wherever auto_offset_reset or the group says).
    positioned: bool = True
    # Kafka hands out offsets below next_offset (source_behind_store was logged); cleared
    # once it reaches next_offset again.
    behind: bool = False
    paused_reason: PauseReason | None = None
    paused_since: float = 0.0
    watermark: int | None = None  # the manifest's next offset: what is durable
    committed: int | None = None  # the last offset Kafka confirmed as committed
    max_age_s: float = 0.0  # the roll policy's: unsealed records older than this are late
    # While paused for the schema registry: True once it answers again.
    registry_answers: Callable[[], bool] | None = None


@dataclass
class WorkerStats:
    """Counts for the worker's last log line and the tests."""

    records: int = 0
    poison: int = 0
    pauses: dict[PauseReason, int] = field(default_factory=lambda: defaultdict(int))
    resumes: int = 0
    commits: int = 0
