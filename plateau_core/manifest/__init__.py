"""The manifest: SQLAlchemy models, migrations and the typed access layer."""

from plateau_core.manifest.engine import sqlite_url
from plateau_core.manifest.manifest import Manifest
from plateau_core.manifest.models import READABLE_STATES, SegmentState
from plateau_core.manifest.opening import open_manifest
from plateau_core.manifest.records import PartitionSpan, SegmentRecord, now_ms

__all__ = [
    "READABLE_STATES",
    "Manifest",
    "PartitionSpan",
    "SegmentRecord",
    "SegmentState",
    "now_ms",
    "open_manifest",
    "sqlite_url",
]
