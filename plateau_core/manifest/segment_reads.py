"""Which segments a read covers and what prunes them: the manifest's segment listings,
promoted statistics and bloom filters (through the in-memory cache)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import func, select

from plateau_core.bloom import Bloom
from plateau_core.column_stats import ColumnStats
from plateau_core.manifest import listing, promoted
from plateau_core.manifest.bloom_cache import Spanned
from plateau_core.manifest.database import ManifestDatabase
from plateau_core.manifest.models import READABLE_STATES, SegmentRow, SegmentState
from plateau_core.manifest.records import RECORD_COLUMNS, SegmentRecord


class SegmentReads(ManifestDatabase):
    """The reads of segment rows, their statistics and their filters."""

    def segments(
        self,
        topic: str | None = None,
        *,
        partitions: Iterable[int] | None = None,
        start_offset: int | None = None,
        end_offset: int | None = None,
        time_start: int | None = None,
        time_end: int | None = None,
        states: Sequence[SegmentState] = READABLE_STATES,
    ) -> list[SegmentRecord]:
        """Segments overlapping the offset range [start, end) and time range [start, end)."""
        # Plain column tuples, not ORM objects: every read plans with this list, and building
        # an entity per row cost more than SQLite's part of the query.
        query = listing.segment_query(
            RECORD_COLUMNS,
            topic,
            partitions=partitions,
            start_offset=start_offset,
            end_offset=end_offset,
            time_start=time_start,
            time_end=time_end,
            states=states,
        )
        with self._read() as session:
            return [SegmentRecord.from_row(row) for row in session.execute(query)]

    def segment_spans(
        self,
        topic: str,
        *,
        partitions: Iterable[int] | None = None,
        start_offset: int | None = None,
        end_offset: int | None = None,
        time_start: int | None = None,
        time_end: int | None = None,
    ) -> list[listing.SegmentSpan]:
        """`segments`, readable ones, as spans only (listing.py says why)."""
        query = listing.segment_query(
            listing.SPAN_COLUMNS,
            topic,
            partitions=partitions,
            start_offset=start_offset,
            end_offset=end_offset,
            time_start=time_start,
            time_end=time_end,
        )
        with self._read() as session:
            return [listing.SegmentSpan(*row) for row in session.execute(query)]

    def segment_ages(self) -> list[listing.SegmentAge]:
        """Every readable segment, as retention weighs it (listing.SegmentAge)."""
        replicated = SegmentState.REPLICATED.value
        query = listing.segment_query(listing.AGE_COLUMNS, None)
        with self._read() as session:
            return [
                listing.SegmentAge(
                    id_, topic, partition, start, time_max, size, state == replicated
                )
                for id_, topic, partition, start, time_max, size, state in session.execute(query)
            ]

    def topic_totals(
        self, *, after_id: int = 0, upto_id: int | None = None
    ) -> dict[str, tuple[int, int]]:
        """Bytes and count of each topic's readable segments; with `after_id` / `upto_id`,
        of those whose id lies in (after_id, upto_id] only. One aggregate of plain columns;
        `spans` builds a partition entity per row, which held the interpreter lock for
        milliseconds on every look."""
        seg = SegmentRow
        query = select(
            seg.topic, func.coalesce(func.sum(seg.size_bytes), 0), func.count(seg.id)
        ).where(seg.state.in_([s.value for s in READABLE_STATES]))
        if after_id:
            query = query.where(seg.id > after_id)
        if upto_id is not None:
            query = query.where(seg.id <= upto_id)
        with self._read() as session:
            found = session.execute(query.group_by(seg.topic))
            return {topic: (int(size), int(count)) for topic, size, count in found}

    def last_segment_id(self) -> int:
        """The highest segment id given so far (0: none yet). Ids only grow (SQLite's
        AUTOINCREMENT, PostgreSQL's sequence), so the segments added since a look are those
        above the id it saw: counting them costs what they are, not what the store holds."""
        with self._read() as session:
            return int(
                session.execute(select(func.coalesce(func.max(SegmentRow.id), 0))).scalar_one()
            )

    def segments_by_id(self, segment_ids: Sequence[int]) -> list[SegmentRecord]:
        """These segments' records in any state, in (partition, start_offset) order."""
        with self._read() as session:
            found = [
                SegmentRecord.from_row(row)
                for query in listing.by_id_queries(segment_ids)
                for row in session.execute(query)
            ]
        return sorted(found, key=lambda s: (s.topic, s.partition, s.start_offset))

    def column_stats(
        self, topic: str, columns: Iterable[str], segment_ids: Sequence[int] | None = None
    ) -> dict[int, dict[str, ColumnStats]]:
        """Promoted statistics of these columns in the topic's readable segments (of
        `segment_ids` only, when given), by segment id then column; a segment or column
        without any is absent."""
        with self._read() as session:
            return promoted.column_stats(session, topic, columns, segment_ids)

    def blooms(self, topic: str, columns: Iterable[str]) -> dict[int, dict[str, Bloom]]:
        """Bloom filters of these columns in the topic's readable segments, by segment id
        then column; a segment or column without one is absent."""
        with self._read() as session:
            return promoted.blooms(session, topic, columns)

    def blooms_of(
        self, segments: Sequence[Spanned], columns: Iterable[str]
    ) -> dict[int, dict[str, Bloom]]:
        """`blooms` of these segments only, through the in-memory cache (bloom_cache.py)."""

        def fetch(ids: Sequence[int], names: Sequence[str]) -> dict[int, dict[str, Bloom]]:
            with self._read() as session:
                return promoted.blooms_by_id(session, ids, names)

        return self.bloom_cache.blooms(segments, columns, fetch)
