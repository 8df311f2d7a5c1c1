"""The consolidation swap: a run of segments replaced by the one segment holding their rows,
in one transaction (plateau_core.consolidate)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, text

from plateau_core.errors import ManifestConflictError
from plateau_core.manifest.commit import insert_segment, remember_schema, rowcount
from plateau_core.manifest.models import SegmentState
from plateau_core.manifest.records import SegmentFile, SegmentRecord

# A retired row keeps its path (retention removes its file after the grace period; the
# file's name still tells its offsets) but its start offset is stored as -id - 1: the
# (topic, partition, start_offset) key is then free for the consolidated segment, which
# starts where the run did, no offset range a read asks for can match it, and two retired
# rows never share it (a merge of merges retires a second row starting at the same offset
# while the first waits out its grace).
_RETIRE = text(
    "UPDATE segments SET state = :deleting, deleting_at = :stamp, "
    "start_offset = -id - 1 WHERE id = :id AND state = :state AND start_offset >= 0"
)
_STATE = text("UPDATE segments SET state = :state, replicated_at = :replicated_at WHERE id = :id")


def swap(conn: Connection, run: Sequence[SegmentRecord], merged: SegmentFile, stamp: int) -> int:
    """Retire `run` (moved to deleting, compare-and-swap on each row's state) and record
    `merged` in the state the run shared; returns the new row's id.

    Raises ManifestConflictError when any row of the run changed meanwhile (retention marked
    it, replication moved it on): nothing is then changed.
    """
    state = run[0].state
    if any(s.state != state for s in run) or state not in (
        SegmentState.SEALED,
        SegmentState.REPLICATED,
    ):
        raise ManifestConflictError("a consolidation run must share one readable state")
    first = run[0]
    for segment in run:
        moved = conn.execute(
            _RETIRE,
            {
                "deleting": SegmentState.DELETING.value,
                "stamp": stamp,
                "id": segment.id,
                "state": state.value,
            },
        )
        if rowcount(moved) != 1:
            raise ManifestConflictError(
                f"{first.topic}[{first.partition}] segment {segment.path} changed while it "
                "was being consolidated"
            )
    segment_id = insert_segment(conn, first.topic, first.partition, merged, stamp)
    remember_schema(conn, first.topic, merged.stats.schema_fingerprint, merged.schema, stamp)
    if state == SegmentState.REPLICATED:
        replicated = max(s.replicated_at or stamp for s in run)
        conn.execute(_STATE, {"state": state.value, "replicated_at": replicated, "id": segment_id})
    return segment_id
