"""Computing and checking a segment file's region checksums (plateau_core.checksums) over
its bytes, memory-mapped."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
from pyarrow import ipc

from plateau_core.checksums import BatchRange, Checksums

# An Arrow IPC file starts with "ARROW1" padded to 8 bytes; the stream format follows.
_FILE_PREFIX = 8


def file_buffer(source: pa.NativeFile) -> pa.Buffer:
    """The whole file as one buffer; zero-copy for a memory-mapped file."""
    source.seek(0)
    return source.read_buffer(source.size())


def crc(data: pa.Buffer, position: int, length: int) -> int:
    return zlib.crc32(data.slice(position, length))


def ends_problem(data: pa.Buffer, checksums: Checksums) -> str | None:
    """Check the tiling and the head and tail crcs (the schema and the footer): cheap."""
    problem = checksums.tiling_problem(data.size)
    if problem is not None:
        return problem
    if crc(data, 0, checksums.head_end) != checksums.head:
        return f"checksum mismatch in the file header and schema (bytes 0..{checksums.head_end})"
    tail_length = data.size - checksums.tail_start
    if crc(data, checksums.tail_start, tail_length) != checksums.tail:
        return (
            f"checksum mismatch in the footer (bytes {checksums.tail_start}..{data.size}): "
            "the batch index or schema at the end of the file changed"
        )
    return None


def batch_problem(data: pa.Buffer, checksums: Checksums, index: int) -> str | None:
    position, length, expected = checksums.batches[index]
    if crc(data, position, length) != expected:
        return f"checksum mismatch in record batch {index} (bytes {position}..{position + length})"
    return None


def file_problem(data: pa.Buffer, checksums: Checksums) -> str | None:
    """Every region of the file against its checksum."""
    problem = ends_problem(data, checksums)
    for i in range(len(checksums.batches)):
        if problem is not None:
            break
        problem = batch_problem(data, checksums, i)
    return problem


def compute(data: pa.Buffer, ranges: Sequence[BatchRange]) -> Checksums:
    batches = tuple((p, n, crc(data, p, n)) for p, n in ranges)
    head_end = ranges[0][0] if ranges else 0
    tail_start = ranges[-1][0] + ranges[-1][1] if ranges else 0
    return Checksums(
        head=crc(data, 0, head_end),
        tail=crc(data, tail_start, data.size - tail_start),
        batches=batches,
    )


def scan_batch_ranges(data: pa.Buffer) -> list[BatchRange]:
    """The byte range of each record batch message, found by walking the IPC messages.

    A range starts where the previous message of interest ended, so any dictionary message
    written with a batch belongs to that batch's range, as it does when writing.
    """
    source = pa.BufferReader(data)
    source.seek(_FILE_PREFIX)
    reader = ipc.MessageReader.open_stream(source)
    ranges: list[BatchRange] = []
    start: int | None = None
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        if message is None:
            break
        end = source.tell()
        if message.type == "schema":
            start = end
        elif message.type == "record batch":
            if start is None:
                raise pa.ArrowInvalid("a record batch precedes the schema")
            ranges.append((start, end - start))
            start = end
    return ranges


def schema_end(data: pa.Buffer) -> int:
    """Where the schema message (the first message after the file prefix) ends."""
    source = pa.BufferReader(data)
    source.seek(_FILE_PREFIX)
    message = ipc.MessageReader.open_stream(source).read_next_message()
    if message is None or message.type != "schema":
        raise pa.ArrowInvalid("the file does not start with a schema message")
    return int(source.tell())


def of_written(path: Path, ranges: Sequence[BatchRange]) -> Checksums:
    """Checksums of a segment just written, from the positions the writer reported.

    The IPC writer writes the magic and the schema together with the first batch, so the
    first range is moved to start after the schema message. Positions that do not tile the
    file (another pyarrow writing differently) fall back to walking the messages.
    """
    with pa.memory_map(str(path), "r") as source:
        return of_buffer(file_buffer(source), ranges)


def of_buffer(data: pa.Buffer, ranges: Sequence[BatchRange]) -> Checksums:
    """Checksums of a segment's bytes built in memory, from the positions the writer
    reported (as `of_written`)."""
    adjusted = list(ranges)
    if adjusted:
        first_end = adjusted[0][0] + adjusted[0][1]
        start = schema_end(data)
        adjusted[0] = (start, first_end - start)
    checksums = compute(data, adjusted)
    if checksums.tiling_problem(data.size) is not None:
        checksums = compute(data, scan_batch_ranges(data))
    return checksums


def of_file(path: Path) -> Checksums:
    """Checksums of an existing segment file (for rebuilding a manifest)."""
    with pa.memory_map(str(path), "r") as source:
        data = file_buffer(source)
        return compute(data, scan_batch_ranges(data))
