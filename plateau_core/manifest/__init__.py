"""The manifest: SQLAlchemy models, migrations and the typed access layer."""

from plateau_core.manifest.manifest import (
    Manifest,
    PartitionSpan,
    SegmentRecord,
    now_ms,
    sqlite_url,
)
from plateau_core.manifest.models import READABLE_STATES, SegmentState

__all__ = [
    "READABLE_STATES",
    "Manifest",
    "PartitionSpan",
    "SegmentRecord",
    "SegmentState",
    "now_ms",
    "sqlite_url",
]
