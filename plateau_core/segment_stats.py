"""What the manifest records about a segment file, as the writer and rebuild report it."""

from __future__ import annotations

from dataclasses import dataclass

from plateau_core.bloom import Bloom
from plateau_core.checksums import Checksums
from plateau_core.column_stats import ColumnStats


@dataclass(frozen=True)
class SegmentStats:
    """What the manifest records about a segment file."""

    start_offset: int
    end_offset: int  # exclusive: last offset + 1
    record_count: int
    time_min: int  # epoch milliseconds
    time_max: int
    size_bytes: int
    schema_fingerprint: str
    # None for segments recorded before checksums existed: they get the other checks only.
    checksums: Checksums | None = None
    # Promoted per-column statistics (plateau_core.column_stats); empty for segments recorded
    # before schema version 5.
    columns: tuple[ColumnStats, ...] = ()
    # Bloom filters of the columns the topic's index lists (plateau_core.bloom), as written
    # in the file's footer.
    blooms: tuple[Bloom, ...] = ()
