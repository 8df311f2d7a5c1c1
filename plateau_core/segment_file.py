"""Segment files: durable writes (temp → fsync → rename → fsync dir) and inspection.

A synced segment is built in memory and written with O_DIRECT where it can be
(plateau_core.direct_io), else through the page cache; the file's bytes are the same.
"""

from __future__ import annotations

import json
import mmap
import os
import uuid
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import ipc

import plateau_core.crc as crcs
from plateau_core import direct_io
from plateau_core.adaptive_compression import SegmentCodec
from plateau_core.bloom import BLOOM_KEY, Bloom, build, footer_value, from_footer
from plateau_core.checksums import BatchRange, Checksums
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
    footer = {BATCH_INDEX_KEY: json.dumps(spans, separators=(",", ":")).encode()}
    if blooms:
        footer[BLOOM_KEY] = footer_value(blooms)
    layout = _Layout(table.schema, groups, options, footer, choice.measures)
    try:
        # O_DIRECT writes go to the device at once: without fsync, the buffered write is
        # the faster one and nothing waits for the disk.
        built = _write_direct(temp, table, layout) if fsync else None
        if built is None:
            built = _write_buffered(temp, layout, fsync=fsync)
        temp.rename(final)
        if fsync:
            fsync_path(directory)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    ranges, raw, checksums = built
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


class _Layout(NamedTuple):
    """What goes into a segment file, however it is written."""

    schema: pa.Schema
    groups: list[pa.Table]
    options: ipc.IpcWriteOptions
    footer: dict[bytes, bytes]
    measures: bool  # the codec choice wants the batches' uncompressed size


class _Built(NamedTuple):
    ranges: list[BatchRange]
    raw: int  # the batches' uncompressed IPC size, when the layout measures it
    checksums: Checksums


def _write_ipc(sink: pa.NativeFile, layout: _Layout) -> tuple[list[BatchRange], int]:
    """The IPC file into `sink`, whose tell() is exact (unbuffered): each batch's range."""
    ranges: list[BatchRange] = []
    raw = 0
    with ipc.new_file(
        sink, layout.schema, options=layout.options, metadata=layout.footer
    ) as writer:
        for group in layout.groups:
            before = sink.tell()
            # One regrouped copy at a time, dropped once written.
            single = group.combine_chunks() if group.column(0).num_chunks > 1 else group
            writer.write_table(single)
            ranges.append((before, sink.tell() - before))
            if layout.measures:
                raw += sum(ipc.get_record_batch_size(b) for b in single.to_batches())
    return ranges, raw


def _write_buffered(temp: Path, layout: _Layout, *, fsync: bool) -> _Built:
    """Through the page cache; the checksums read back while the file is still there,
    before fsync makes it durable."""
    with pa.OSFile(str(temp), "wb") as sink:
        ranges, raw = _write_ipc(sink, layout)
        if fsync:
            sink.flush()
    checksums = crcs.of_written(temp, ranges)
    if fsync:
        fsync_path(temp)
    return _Built(ranges, raw, checksums)


def _write_direct(temp: Path, table: pa.Table, layout: _Layout) -> _Built | None:
    """Built in this thread's arena, checksummed there, written with O_DIRECT and synced
    (plateau_core.direct_io); None, with no file left, when it is not written that way: the
    file would not fit the arena, or the filesystem refuses O_DIRECT."""
    space = direct_io.arena(_size_bound(table, layout))
    if space is None:
        return None
    fd = direct_io.open_direct(temp)
    if fd is None:
        return None
    try:
        built, size = _build(space, layout)
        if built is not None and not direct_io.write_synced(fd, temp.parent, space, size):
            built = None
    finally:
        os.close(fd)
        direct_io.rest(space)
    if built is None:
        temp.unlink()
    return built


def _build(space: mmap.mmap, layout: _Layout) -> tuple[_Built | None, int]:
    """The IPC file in `space` and its size; None when it outgrew the space (the bound is
    an estimate: the buffered write takes over)."""
    buffer = pa.py_buffer(space)
    sink = pa.FixedSizeBufferWriter(buffer)
    try:
        ranges, raw = _write_ipc(sink, layout)
    except OSError:  # out of bounds: nothing else fails writing to memory
        return None, 0
    size = sink.tell()
    sink.close()
    return _Built(ranges, raw, crcs.of_buffer(buffer.slice(0, size), ranges)), size


def _size_bound(table: pa.Table, layout: _Layout) -> int:
    """At least the IPC file's size: the data, what a codec adds to a buffer it cannot
    shrink (lz4 and zstd: under 1/128), each batch's message and padding, the schema and
    the footer."""
    fields = sum(_nested_fields(field.type) for field in layout.schema)
    per_batch = 1024 + 128 * fields
    data = int(table.nbytes)
    schema_bytes = int(layout.schema.serialize().size)
    return (
        data
        + data // 64
        + per_batch * len(layout.groups)
        + 2 * schema_bytes
        + sum(len(value) for value in layout.footer.values())
        + 64 * 1024
    )


def _nested_fields(type_: pa.DataType) -> int:
    """The field and every field nested in it: each has its own buffers in a batch."""
    return 1 + sum(_nested_fields(type_.field(i).type) for i in range(type_.num_fields))


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
