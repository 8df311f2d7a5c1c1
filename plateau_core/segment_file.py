"""Segment files: durable writes (temp → fsync → rename → fsync dir) and inspection."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import ipc

import plateau_core.crc as crcs
from plateau_core.adaptive_compression import SegmentCodec
from plateau_core.bloom import BLOOM_KEY, Bloom, build, footer_value, from_footer
from plateau_core.checksums import BatchRange
from plateau_core.column_stats import table_columns
from plateau_core.errors import InvalidInputError
from plateau_core.names import TEMP_MARKER, fsync_path, make_dirs, segment_name
from plateau_core.policies import Compression, IndexPolicy
from plateau_core.schema import OFFSET, TIMESTAMP, fingerprint
from plateau_core.segment_stats import SegmentStats

# Footer metadata: per record batch [first offset, last offset, min time, max time], so
# readers skip batches inside a segment as the manifest lets them skip segments.
BATCH_INDEX_KEY = b"plateau.batches"
# Appends of a few rows each would make thousands of tiny batches; regroup them.
MIN_BATCH_ROWS = 4096
TARGET_BATCH_ROWS = 65536
# A regrouped batch is a copy made while sealing, on top of the buffered data the memory
# budget counts: capped so that each seal thread holds at most this much extra.
TARGET_BATCH_BYTES = 8 * 1024 * 1024

BatchSpan = tuple[int, int, int, int]


def table_stats(table: pa.Table) -> tuple[int, int, int, int]:
    """(start_offset, end_offset, time_min, time_max) of a non-empty segment table."""
    offsets = table.column(OFFSET)
    times = pc.min_max(table.column(TIMESTAMP).cast(pa.int64()))
    start = offsets[0].as_py()
    end = offsets[len(offsets) - 1].as_py() + 1
    return start, end, times["min"].as_py(), times["max"].as_py()


def write_segment(
    directory: Path,
    table: pa.Table,
    compression: Compression | SegmentCodec = "lz4",
    *,
    fsync: bool = True,
    index: IndexPolicy | None = None,
    name: str | None = None,
) -> tuple[Path, SegmentStats]:
    """Write `table` as `{start_offset:020d}.arrow` in `directory`, durably.

    The file appears under its final name only when complete; a crash leaves at most a
    temp file that recovery removes. Writing the same segment again replaces it. The bloom
    filters `index` asks for go in the footer, beside the batch index. `name` replaces the
    sealed segment's name (a consolidated segment's, plateau_core.names). A SegmentCodec
    `compression` (plateau_core.adaptive_compression) hears what its codec saved.
    """
    if table.num_rows == 0:
        raise InvalidInputError("a segment needs at least one row")
    start, end, time_min, time_max = table_stats(table)
    groups = _groups(table)
    spans = [span for group in groups if (span := _span(group)) is not None]
    blooms = _blooms(table, index or IndexPolicy())
    make_dirs(directory, fsync=fsync)
    final = directory / (name or segment_name(start))
    temp = directory / f".{final.name}{TEMP_MARKER}{uuid.uuid4().hex[:12]}"
    choice = compression if isinstance(compression, SegmentCodec) else SegmentCodec(compression)
    codec = choice.codec
    options = ipc.IpcWriteOptions(compression=None if codec == "none" else codec)
    ranges: list[BatchRange] = []
    raw = 0  # the batches' uncompressed IPC size, when the choice asks for it
    try:
        # OSFile is unbuffered, so tell() around each write is where that batch's message
        # lies in the file.
        with pa.OSFile(str(temp), "wb") as sink:
            footer = {BATCH_INDEX_KEY: json.dumps(spans, separators=(",", ":")).encode()}
            if blooms:
                footer[BLOOM_KEY] = footer_value(blooms)
            with ipc.new_file(sink, table.schema, options=options, metadata=footer) as writer:
                for group in groups:
                    before = sink.tell()
                    # One regrouped copy at a time, dropped once written.
                    single = group.combine_chunks() if group.column(0).num_chunks > 1 else group
                    writer.write_table(single)
                    ranges.append((before, sink.tell() - before))
                    if choice.measures:
                        raw += sum(ipc.get_record_batch_size(b) for b in single.to_batches())
            if fsync:
                sink.flush()
        # Read back while the file is still in the page cache, before fsync makes it durable.
        checksums = crcs.of_written(temp, ranges)
        if fsync:
            fsync_path(temp)
        temp.rename(final)
        if fsync:
            fsync_path(directory)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    written = sum(length for _, length in ranges)
    choice.wrote(raw if choice.measures else written, written, start, end)
    stats = SegmentStats(
        start_offset=start,
        end_offset=end,
        record_count=table.num_rows,
        time_min=time_min,
        time_max=time_max,
        size_bytes=final.stat().st_size,
        schema_fingerprint=fingerprint(table.schema),
        checksums=checksums,
        columns=table_columns(table),
        blooms=blooms,
    )
    return final, stats


def _blooms(table: pa.Table, index: IndexPolicy) -> tuple[Bloom, ...]:
    """Filters of the listed columns this segment has, of a type that has filters; a listed
    column the segment lacks or of another type (a float, say) simply gets none."""
    found = []
    for column in index.bloom:
        if column in table.column_names:
            bloom = build(column, table.column(column), index.fpp)
            if bloom is not None:
                found.append(bloom)
    return tuple(found)


def _groups(table: pa.Table) -> list[pa.Table]:
    """Zero-copy slices of `table`, each to be written as one record batch.

    Batches that are big enough stay as they are. Small ones (many small appends) are grouped
    into slices of up to TARGET_BATCH_ROWS rows and TARGET_BATCH_BYTES, which the writer
    combines one at a time: never a copy of the whole segment.
    """
    batches = [b for b in table.to_batches() if b.num_rows > 0]
    if not batches or table.num_rows / len(batches) >= MIN_BATCH_ROWS:
        return [pa.Table.from_batches([b], schema=table.schema) for b in batches]
    groups: list[pa.Table] = []
    pending: list[pa.RecordBatch] = []
    rows = nbytes = 0
    for batch in batches:
        if pending and (
            rows + batch.num_rows > TARGET_BATCH_ROWS or nbytes + batch.nbytes > TARGET_BATCH_BYTES
        ):
            groups.append(pa.Table.from_batches(pending, schema=table.schema))
            pending, rows, nbytes = [], 0, 0
        pending.append(batch)
        rows += batch.num_rows
        nbytes += batch.nbytes
    groups.append(pa.Table.from_batches(pending, schema=table.schema))
    return groups


def _span(group: pa.Table) -> BatchSpan | None:
    if group.num_rows == 0:
        return None
    start, end, time_min, time_max = table_stats(group)
    return (start, end - 1, time_min, time_max)


def read_batch_index(reader: ipc.RecordBatchFileReader) -> list[BatchSpan] | None:
    """The per-batch spans a segment was written with (None for files without them)."""
    raw = (reader.metadata or {}).get(BATCH_INDEX_KEY)
    if raw is None:
        return None
    spans = [tuple(s) for s in json.loads(raw)]
    return spans if len(spans) == reader.num_record_batches else None


def open_segment(path: Path, fields: list[int] | None = None) -> ipc.RecordBatchFileReader:
    """A reader over a memory-mapped segment file; `fields` limits the columns decoded."""
    options = None if fields is None else ipc.IpcReadOptions(included_fields=fields)
    return ipc.open_file(pa.memory_map(str(path), "r"), options=options)


def inspect_segment(path: Path) -> SegmentStats:
    """Read a segment file's own facts, checksums included; raises on a file that is not a
    readable segment."""
    reader = open_segment(path)
    table = reader.read_all()
    if table.num_rows == 0:
        raise InvalidInputError(f"{path} holds no rows")
    table.validate(full=True)
    start, end, time_min, time_max = table_stats(table)
    return SegmentStats(
        start_offset=start,
        end_offset=end,
        record_count=table.num_rows,
        time_min=time_min,
        time_max=time_max,
        size_bytes=path.stat().st_size,
        schema_fingerprint=fingerprint(table.schema),
        checksums=crcs.of_file(path),
        columns=table_columns(table),
        blooms=from_footer(reader.metadata),
    )


def size_problem(path: Path, size_bytes: int) -> str | None:
    """The file is missing or not the size its manifest row says; None when it is."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "file is missing"
    if size != size_bytes:
        return f"size is {size} bytes, the manifest says {size_bytes}"
    return None


def quick_check(path: Path, expected: SegmentStats) -> str | None:
    """Cheap consistency check of a file against its manifest row; a problem or None.

    Reads the footer and the offset column only, so startup stays fast on large stores.
    """
    problem = size_problem(path, expected.size_bytes)
    if problem is not None:
        return problem
    try:
        reader = open_segment(path)
        rows = 0
        first = last = None
        for i in range(reader.num_record_batches):
            offsets = reader.get_batch(i).column(OFFSET)
            if len(offsets) == 0:
                continue
            rows += len(offsets)
            first = offsets[0].as_py() if first is None else first
            last = offsets[len(offsets) - 1].as_py()
    except (OSError, pa.ArrowException) as exc:
        return f"unreadable: {exc}"
    if rows != expected.record_count:
        return f"holds {rows} rows, the manifest says {expected.record_count}"
    if first != expected.start_offset or last is None or last + 1 != expected.end_offset:
        return (
            f"offsets {first}..{last} do not match the manifest's "
            f"[{expected.start_offset}, {expected.end_offset})"
        )
    return None
