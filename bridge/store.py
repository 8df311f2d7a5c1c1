"""The configured store: opening it, and the retention and consolidation its configuration
asks for."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol

from bridge.config.models import Config
from plateau_core import Retention, RetentionPolicy, RetentionReport, Store, StoreLimits, Writer
from plateau_core.consolidate import MERGEABLE, ConsolidationReport, Consolidator
from plateau_core.manifest import SegmentState
from plateau_core.pace import Pace
from plateau_core.policies import ConsolidatePolicy, IndexPolicy


class Telemetry(Protocol):
    def add(self, name: str, labels: tuple[str, ...], amount: float = 1.0) -> None: ...


def open_store(config: Config) -> Store:
    return Store.open(config.storage.data_dir, manifest_url=config.storage.manifest_url)


def retention_for(
    config: Config,
    store: Store,
    observer: Callable[[RetentionReport], None] | None = None,
) -> Retention:
    storage = config.storage

    def resolve(topic: str) -> RetentionPolicy | None:
        derived = config.rollup_retention(topic)
        if derived is not None:
            return derived
        mapping = config.mapping_for_plateau_topic(topic)
        return None if mapping is None else config.retention_policy(mapping)

    return Retention(
        store,
        default=config.defaults.retention.apply(RetentionPolicy()),
        limits=StoreLimits(
            max_bytes=storage.max_bytes,
            min_free_disk_bytes=storage.min_free_disk,
            deletion_grace_s=storage.deletion_grace,
        ),
        resolve=resolve,
        observer=observer,
    )


def consolidator_for(
    config: Config,
    store: Store,
    writer: Writer,
    telemetry: Telemetry | None = None,
    *,
    produced: bool = False,
) -> Consolidator:
    """Consolidation of the partitions `writer` owns, for topics whose mapping sets
    `consolidate` and produced topics that do not say (Config.consolidation; `produced`:
    the writer is the Kafka API's, so a topic no mapping names is one a producer created);
    each pass is counted in `telemetry` (the plateau_consolidat* metrics)."""

    def resolve(topic: str) -> tuple[ConsolidatePolicy, IndexPolicy] | None:
        consolidate = config.consolidation(topic, produced=produced)
        if consolidate is None:
            return None
        if config.rollup_of(topic) is not None:
            # A roll-up topic is consolidated as its topic is (without its bloom filters).
            return consolidate.policy(), IndexPolicy()
        mapping = config.mapping_for_plateau_topic(topic)
        return consolidate.policy(), IndexPolicy() if mapping is None else mapping.index.policy()

    def guard(topic: str, partition: int) -> contextlib.AbstractContextManager[bool]:
        # Only the raw partition's writer seals into its roll-up partitions: holding the
        # raw one holds both.
        base, marker, _ = topic.rpartition(".rollup.")
        owner = base if marker and config.rollup_of(topic) is not None else topic
        return writer.maintaining(owner, partition)

    def observe(report: ConsolidationReport) -> None:
        if telemetry is None:
            return
        for merge in report.merged:
            telemetry.add("consolidations", (merge.topic,))
            telemetry.add("consolidated_segments", (merge.topic,), merge.segments - 1)
        if report.conflicts:
            telemetry.add("errors", ("consolidation_conflict",), report.conflicts)
        if report.unreadable:
            telemetry.add("errors", ("consolidation_unreadable",), report.unreadable)
        if report.failed:
            telemetry.add("errors", ("consolidation_failed",))

    # A replication run copies sealed segments and then marks them replicated; swapping them
    # meanwhile would have the merged segment copied again. With a target configured, only
    # segments already replicated are merged.
    replicating = config.replication.target is not None
    return Consolidator(
        store,
        {},
        resolve=resolve,
        states=(SegmentState.REPLICATED,) if replicating else MERGEABLE,
        compression=writer.codecs,
        guard=guard,
        observer=observe,
        min_free_disk_bytes=config.storage.min_free_disk or 0,
        pace=Pace(config.storage.consolidate_max_rate),
    )
