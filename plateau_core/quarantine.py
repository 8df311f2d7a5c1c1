"""Taking a damaged segment out of reads: the manifest's state change and its log line."""

from __future__ import annotations

import structlog

from plateau_core.manifest import Manifest, SegmentRecord

log = structlog.get_logger(__name__)


def quarantine(manifest: Manifest, segment: SegmentRecord, problem: str, **context: object) -> bool:
    """Quarantine `segment` for `problem` and log it; False if it was no longer readable
    (quarantined already, or retired by retention meanwhile)."""
    if not manifest.quarantine(segment.id, problem):
        return False
    log.error(
        "segment_quarantined",
        topic=segment.topic,
        partition=segment.partition,
        start_offset=segment.start_offset,
        end_offset=segment.end_offset,
        path=segment.path,
        problem=problem,
        **context,
    )
    return True
