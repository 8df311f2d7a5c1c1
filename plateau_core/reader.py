"""Reading a topic: the manifest picks the segments, the batches are filtered and conformed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import structlog
from pyarrow import ipc

import plateau_core.crc as crcs
from plateau_core.checksums import ChecksumFormatError, Checksums
from plateau_core.conform import UnrepresentableValueError, conform
from plateau_core.errors import InvalidInputError, PlateauError
from plateau_core.handle import StoreHandle
from plateau_core.manifest import READABLE_STATES, SegmentRecord
from plateau_core.quarantine import quarantine
from plateau_core.read_request import ReadRequest, at_or_beyond
from plateau_core.schema import OFFSET, TIMESTAMP
from plateau_core.segment_file import open_segment, read_batch_index
from plateau_core.stored_names import TwinColumnsError, read_names
from plateau_core.top_by_time import time_ordered, top_by_time
from plateau_core.topic_schema import topic_schema
from plateau_core.where import admitted_by_blooms, admitted_by_stats

log = structlog.get_logger(__name__)


class SegmentUnavailableError(PlateauError):
    """A segment in the read snapshot cannot be read; it is reported, never skipped."""


class SegmentCorruptError(SegmentUnavailableError):
    """A segment file disagrees with its manifest row (size or checksums): its bytes changed
    after it was written. No row of it is returned."""

    def __init__(self, segment: SegmentRecord, problem: str) -> None:
        super().__init__(
            f"segment {segment.path} ({segment.topic}[{segment.partition}] offsets "
            f"[{segment.start_offset}, {segment.end_offset})) is corrupt: {problem}"
        )
        self.segment = segment
        self.problem = problem


class ReadResult:
    """An iterator of RecordBatches over a snapshot of the manifest.

    The segment list is fixed when the result is made; retention leaves those files in
    place for its grace period, so a reader that starts within it sees all of them.
    `opened` lists the segment files actually opened, in order. `schema` is every schema
    the topic ever had, merged (a column whose types clash reads as JSON text), narrowed to
    the columns asked for; every batch is conformed to it.
    """

    def __init__(self, store: StoreHandle, request: ReadRequest, *, prune: bool = True) -> None:
        """`prune=False` opens every segment of the ranges even with `where` conditions (to
        check that pruning changes nothing but the files opened)."""
        self.store = store
        self.request = request
        self.pruned = 0  # segments the statistics or bloom filters ruled out, never opened
        segments = self._pruned() if request.where and prune else None
        if segments is None:
            segments = store.manifest.segments(
                request.topic,
                partitions=request.partitions,
                start_offset=request.start_offset,
                end_offset=request.end_offset,
                time_start=request.time_start,
                time_end=request.time_end,
            )
        if request.order_by == "timestamp":
            segments = time_ordered(segments, request.order)
        else:
            segments.sort(key=lambda s: (s.time_min, s.partition, s.start_offset))
            if request.order == "desc":
                segments.reverse()
        self.segments: list[SegmentRecord] = segments
        # After the listing: the schemas of every segment listed are merged.
        self.schema = self._schema()
        self.scan = ScanCounters()

    def _pruned(self) -> list[SegmentRecord] | None:
        """The segments a `where` read must open: spans listed, pruned, then the full
        records of those kept (listing.py says why). None when a kept segment changed in
        between (retired by retention or merged away): the caller lists them all again."""
        request, manifest = self.request, self.store.manifest
        spans = manifest.segment_spans(
            request.topic,
            partitions=request.partitions,
            start_offset=request.start_offset,
            end_offset=request.end_offset,
            time_start=request.time_start,
            time_end=request.time_end,
        )
        # A clashed column's statistics and filters are of its stored types, not of the text
        # it reads as: no segment is ruled out by a condition on it.
        clashed = topic_schema(manifest, request.topic).clashes
        where = tuple(c for c in request.where if c.column not in clashed)
        columns = [c.column for c in where]
        # Filters first: a needle's value is in few segments' filters, and then only those
        # few segments' statistics are read, by key, instead of the whole topic's.
        blooms = manifest.blooms_of(spans, columns)
        kept = [s for s in spans if admitted_by_blooms(where, blooms.get(s.id, {}))]
        stats = manifest.column_stats(request.topic, columns, [s.id for s in kept])
        kept = [s for s in kept if admitted_by_stats(where, stats.get(s.id, {}), s.record_count)]
        records = manifest.segments_by_id([s.id for s in kept])
        same = [(r.id, r.partition, r.start_offset, r.end_offset) for r in records]
        if same != [(s.id, s.partition, s.start_offset, s.end_offset) for s in kept] or any(
            r.state not in READABLE_STATES for r in records
        ):
            return None
        self.pruned = len(spans) - len(kept)
        return records

    def _schema(self) -> pa.Schema:
        """Every schema the topic ever had, merged: the same columns whatever is selected."""
        found = topic_schema(self.store.manifest, self.request.topic)
        merged = found.schema
        for column, types in found.clashes.items():
            log.warning(
                "column_types_clash",
                topic=self.request.topic,
                column=column,
                types=list(types),
                read_as="string (JSON text of the other types' values)",
            )
        if found.clashes:
            self.request = replace(self.request, as_text=frozenset(found.clashes))
        times = tuple(
            (c.column, merged.field(c.column).type)
            for c in self.request.where
            if c.column in merged.names and pa.types.is_timestamp(merged.field(c.column).type)
        )
        if times:
            self.request = replace(self.request, times_as=times)
        # Kept for ordering by time: a schema a writer records meanwhile (a column widened)
        # must not give the sorted rows other types than the result's.
        self._merged: pa.Schema = merged
        if self.request.columns is None:
            return merged
        missing = [c for c in self.request.columns if c not in merged.names]
        # A topic never written reads as no rows, whatever the columns.
        if missing and self.store.manifest.schemas(self.request.topic):
            raise InvalidInputError(
                f"topic {self.request.topic!r} has no column(s) {missing}; it has {merged.names}"
            )
        return pa.schema([merged.field(c) for c in self.request.columns if c in merged.names])

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """The rows, batch by batch, in the order asked for; each segment is checked against
        its recorded checksums before its first row is returned.

        Raises:
            SegmentUnavailableError: A segment file of the snapshot is missing or does not
                decode; its rows are never silently left out.
            SegmentCorruptError: A segment's bytes disagree with its manifest row; it is
                quarantined, so the next read plans without it.
            InvalidInputError: A `where` value cannot be compared with its column's type.
        """
        remaining = self.request.limit
        if remaining == 0:
            return
        if self.request.order_by == "timestamp":
            yield from self._by_time()
            return
        for segment in self.segments:
            for batch in self._segment_batches(segment):
                if remaining is not None:
                    if batch.num_rows >= remaining:
                        yield batch.slice(0, remaining)
                        return
                    remaining -= batch.num_rows
                yield batch

    def _by_time(self) -> Iterator[pa.RecordBatch]:
        """The rows in timestamp order, reading the segments until the limit is certain."""
        wanted = {*self.schema.names, OFFSET, TIMESTAMP}
        sorting = pa.schema([f for f in self._merged if f.name in wanted])
        if TIMESTAMP not in sorting.names:  # a topic without segments
            return
        request = self.request

        def read(segment: SegmentRecord, threshold: int | None) -> Iterator[pa.RecordBatch]:
            narrowed = request if threshold is None else at_or_beyond(request, threshold)
            yield from self._segment_batches(segment, narrowed, conformed=False)

        table = top_by_time(self.segments, read, sorting, request.limit, request.order)
        yield from table.select(self.schema.names).to_batches()

    def _segment_batches(
        self, segment: SegmentRecord, request: ReadRequest | None = None, *, conformed: bool = True
    ) -> Iterator[pa.RecordBatch]:
        path = self.store.segment_path(segment)
        try:
            batches = segment_batches(path, segment, request or self.request, self.scan)
            for batch in batches:
                yield conform(batch, self.schema) if conformed else batch
        except UnrepresentableValueError as exc:
            raise exc.in_segment(segment) from exc
        except SegmentCorruptError as exc:
            # So the next query plans without it instead of failing on it again.
            quarantine(self.store.manifest, segment, exc.problem, found_by="read")
            raise

    @property
    def opened(self) -> list[str]:
        """Paths (relative to the data folder) of the segment files opened so far."""
        return self.scan.opened

    @property
    def batches_read(self) -> int:
        """Record batches decoded so far."""
        return self.scan.batches_read

    @property
    def batches_skipped(self) -> int:
        """Record batches the segments' footer index ruled out without reading them."""
        return self.scan.batches_skipped

    def to_table(self) -> pa.Table:
        """Every row at once, with `schema`; raises as iterating does."""
        return pa.Table.from_batches(list(self), schema=self.schema)


@dataclass
class ScanCounters:
    """What a scan touched: segment files opened, and batches read or skipped by the
    per-batch index inside them."""

    opened: list[str] = field(default_factory=list)
    batches_read: int = 0
    batches_skipped: int = 0


def needed_fields(path: Path, columns: tuple[str, ...] | None) -> list[int] | None:
    """Indices of the columns to decode: the projection plus what the filters need."""
    if columns is None:
        return None
    return _field_indices(read_names(open_segment(path).schema.names), columns)


def _field_indices(
    names: list[str], columns: tuple[str, ...], where_columns: tuple[str, ...] = ()
) -> list[int]:
    """Indices of the columns a read needs, among a segment's columns `names` as they read."""
    wanted = {*columns, OFFSET, TIMESTAMP, *where_columns}
    return [i for i, name in enumerate(names) if name in wanted]


def segment_batches(
    path: Path,
    segment: SegmentRecord,
    request: ReadRequest,
    counters: ScanCounters,
) -> Iterator[pa.RecordBatch]:
    """The rows of one segment file that pass `request`, batch by batch, in its own schema
    with its columns named as they read (a `partition` stored before the `_` suffix rule as
    `partition_`, plateau_core.stored_names).

    Needs only the file and its manifest row, so Spark executors call it without the manifest.
    Before the first batch is returned, the file's size, its head and tail and every batch
    about to be decoded are checked against the row's checksums: a corrupt segment raises
    SegmentCorruptError and yields nothing. Batches the index skips are not read at all.
    Unlike ReadResult, it quarantines nothing.

    Raises:
        SegmentUnavailableError: The file cannot be opened or a batch does not decode.
        SegmentCorruptError: The file disagrees with the row's size or checksums.
        SegmentUnavailableError: The file holds a column stored before the `_` suffix rule
            and its suffixed name too (`partition` and `partition_`): no plateau writer
            stores both, and one would hide the other.
    """
    unavailable = (
        f"segment {segment.path} ({segment.topic}[{segment.partition}] offsets "
        f"[{segment.start_offset}, {segment.end_offset})) cannot be read"
    )
    try:
        source = pa.memory_map(str(path), "r")
    except (OSError, pa.ArrowException) as exc:
        raise SegmentUnavailableError(f"{unavailable}: {exc}") from exc
    with source:
        data = crcs.file_buffer(source)
        checksums = _checksums(segment)
        if data.size != segment.size_bytes:
            raise SegmentCorruptError(
                segment, f"size is {data.size} bytes, the manifest says {segment.size_bytes}"
            )
        if checksums is not None and (problem := crcs.ends_problem(data, checksums)):
            raise SegmentCorruptError(segment, problem)
        try:
            reader = ipc.open_file(data)
        except (OSError, pa.ArrowException) as exc:
            raise SegmentUnavailableError(f"{unavailable}: {exc}") from exc
        stored = reader.schema.names
        names = _read_names(stored, segment)
        if request.columns is not None:
            where_columns = tuple(c.column for c in request.where)
            fields = _field_indices(names, request.columns, where_columns)
            stored = [stored[i] for i in fields]
            names = [names[i] for i in fields]
            try:
                reader = ipc.open_file(data, options=ipc.IpcReadOptions(included_fields=fields))
            except (OSError, pa.ArrowException) as exc:
                raise SegmentUnavailableError(f"{unavailable}: {exc}") from exc
        counters.opened.append(segment.path)
        count = reader.num_record_batches
        if checksums is not None and len(checksums.batches) != count:
            raise SegmentCorruptError(
                segment,
                f"the file holds {count} record batches, its checksums {len(checksums.batches)}",
            )
        filtered = not request.covers(segment)
        selected = _select(reader, request, counters, filtered=filtered)
        if checksums is not None:
            # All before the first yield: a consumer never holds rows of a segment that then
            # turns out to be corrupt.
            for i in selected:
                if problem := crcs.batch_problem(data, checksums, i):
                    raise SegmentCorruptError(segment, problem)
        yield from _decode(
            reader,
            selected,
            request,
            counters,
            filtered=filtered,
            unavailable=unavailable,
            renamed=None if names == stored else names,
        )


def _read_names(stored: list[str], segment: SegmentRecord) -> list[str]:
    """The segment's columns `stored` as they read (plateau_core.stored_names)."""
    try:
        return read_names(stored)
    except TwinColumnsError as exc:
        where = f"topic {segment.topic!r}: segment {segment.located}"
        raise SegmentUnavailableError(str(exc.at(where))) from exc


def _select(
    reader: ipc.RecordBatchFileReader,
    request: ReadRequest,
    counters: ScanCounters,
    *,
    filtered: bool,
) -> list[int]:
    """The batches to decode, in read order; those the footer index rules out are skipped."""
    count = reader.num_record_batches
    index = read_batch_index(reader) if filtered else None
    indices = range(count - 1, -1, -1) if request.order == "desc" else range(count)
    selected = []
    for i in indices:
        if index is not None and not request.overlaps(index[i]):
            counters.batches_skipped += 1
        else:
            selected.append(i)
    return selected


def _checksums(segment: SegmentRecord) -> Checksums | None:
    try:
        return segment.checksums
    except ChecksumFormatError as exc:
        raise SegmentCorruptError(segment, f"its recorded checksums are unreadable: {exc}") from exc


def _decode(
    reader: ipc.RecordBatchFileReader,
    selected: list[int],
    request: ReadRequest,
    counters: ScanCounters,
    *,
    filtered: bool,
    unavailable: str,
    renamed: list[str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The selected batches, filtered, in the order asked for; `renamed`: their columns'
    names as they read, when those differ from the stored ones."""
    for i in selected:
        try:
            batch = reader.get_batch(i)
        except (OSError, pa.ArrowException) as exc:
            raise SegmentUnavailableError(f"{unavailable}: batch {i}: {exc}") from exc
        counters.batches_read += 1
        if renamed is not None:
            # Before the filter: a condition names the column as it reads.
            batch = batch.rename_columns(renamed)
        if filtered:
            mask = request.mask(batch)
            if mask is not None:
                batch = batch.filter(mask)
        if batch.num_rows == 0:
            continue
        if request.order == "desc":
            batch = batch.take(pa.array(range(batch.num_rows - 1, -1, -1), pa.int64()))
        yield batch
