"""Taking a damaged segment out of reads: the manifest's state change and its log line, and
the roll-up segments sealed from its rows taken out with it."""

from __future__ import annotations

import structlog

from plateau_core.manifest import Manifest, SegmentRecord
from plateau_core.rollup import rollup_base

log = structlog.get_logger(__name__)


def quarantine(manifest: Manifest, segment: SegmentRecord, problem: str, **context: object) -> bool:
    """Quarantine `segment` for `problem` and log it, and the roll-up segments holding rows
    rolled up from it; False if it was no longer readable (quarantined already, or retired
    by retention meanwhile)."""
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
    withhold_rollups(manifest, segment)
    return True


def withhold_rollups(manifest: Manifest, raw: SegmentRecord) -> list[SegmentRecord]:
    """Quarantine the readable roll-up segments with rows of the quarantined `raw` segment,
    so that the roll-ups count the rows the raw topic still reads; returns them.

    A roll-up row's `offset` is the first offset of the raw segment it was sealed from, so
    the rows of `raw` are the roll-up rows within its offsets. A roll-up segment of those
    alone goes exactly. One that consolidation merged with rows of other raw segments goes
    whole: a file can only be cut under its partition's lock, which a read that found the
    damage does not hold. Its problem says so, and `plateau verify` lists it."""
    withheld: list[SegmentRecord] = []
    derived = [t for t in manifest.topics() if rollup_base(t) == raw.topic]
    for topic in derived:
        for rolled in manifest.segments(
            topic,
            partitions=[raw.partition],
            start_offset=raw.start_offset,
            end_offset=raw.end_offset,
        ):
            alone = raw.start_offset <= rolled.start_offset and rolled.end_offset <= raw.end_offset
            problem = (
                f"rolled up from quarantined segment {raw.path}"
                if alone
                else f"holds roll-up rows of quarantined segment {raw.path} and, consolidated "
                "with them, of other raw segments: withheld whole"
            )
            if not manifest.quarantine(rolled.id, problem):
                continue
            withheld.append(rolled)
            log.error(
                "rollup_segment_quarantined",
                topic=rolled.topic,
                partition=rolled.partition,
                start_offset=rolled.start_offset,
                end_offset=rolled.end_offset,
                path=rolled.path,
                raw_topic=raw.topic,
                raw_start_offset=raw.start_offset,
                raw_end_offset=raw.end_offset,
                mixed=not alone,
                problem=problem,
            )
    return withheld
