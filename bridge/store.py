"""The configured store: opening it, and the retention its configuration asks for."""

from __future__ import annotations

from collections.abc import Callable

from bridge.config.models import Config
from plateau_core import Retention, RetentionPolicy, RetentionReport, Store, StoreLimits


def open_store(config: Config) -> Store:
    return Store.open(config.storage.data_dir, manifest_url=config.storage.manifest_url)


def retention_for(
    config: Config,
    store: Store,
    observer: Callable[[RetentionReport], None] | None = None,
) -> Retention:
    storage = config.storage

    def resolve(topic: str) -> RetentionPolicy | None:
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
