"""The journal's bytes: how an append group (and the schemas its batches name) is framed in a
journal file, and read back.

A file starts with MAGIC; then frames, each `u32 body length | u32 CRC-32C of body | body`
(the CPU's own CRC instruction, through the crc32c package). The journal's first releases
wrote zlib's CRC-32 under the same MAGIC; such files are read as they are (`_checksum_of`), so
what an older plateau acknowledged and did not seal is replayed after an upgrade.
A body is a schema (`KIND_SCHEMA | u32 id | Arrow IPC schema message`) or a group
(`KIND_GROUP | u64 seq | u16 appends | append...`), an append being
`u16 topic length | topic | u32 partition | i64 advance_to (-1: none) | producer | u16
batches | (u32 schema id | u32 length | Arrow IPC record batch message)...`, and the producer
`u8 present | i64 id | i16 epoch | i32 first sequence | i32 last sequence | i64 base
offset`. Lazy records (plateau_core.lazy) take the schema id LAZY and hold `u16 kind length |
kind | payload`, read back by the loader registered for the kind. Little-endian throughout.
Record batches are Arrow's own message bytes, so writing one costs a serialize (no row is
touched) and reading one is zero-copy over the file.

A file is self-contained: it holds every schema its groups name before the first group that
names it, so files can be deleted from the front independently.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import crc32c
import pyarrow as pa
from pyarrow import ipc

from plateau_core.errors import PlateauError
from plateau_core.lazy import Item, load
from plateau_core.producers import ProducerBatch
from plateau_core.slog import Append, Prepared

MAGIC = b"PLJRNL01"
KIND_SCHEMA, KIND_GROUP = 1, 2
LAZY = 0xFFFFFFFF  # the schema id of lazy records
FRAME = struct.Struct("<II")
_GROUP_HEAD = struct.Struct("<BQH")
_SCHEMA_HEAD = struct.Struct("<BI")
_APPEND_HEAD = struct.Struct("<IqBqhiiqH")
_TOPIC_LEN = struct.Struct("<H")
_BATCH_HEAD = struct.Struct("<II")
_NO_PRODUCER = (0, 0, 0, 0, 0, 0)

Chunk: TypeAlias = bytes | memoryview | pa.Buffer


class JournalCorruptError(PlateauError):
    """A journal file cannot be read back whole where it must be (its damage is not a torn
    tail), so acknowledged records would be lost by going on."""


@dataclass(frozen=True)
class Encoded:
    """A group ready to be written: its frame as chunks (written as they are, no copy) and
    the schemas it names, which a file must hold before it."""

    seq: int
    chunks: list[Chunk]
    nbytes: int
    schema_ids: tuple[int, ...]


class SchemaIds:
    """Numbers the schemas a journal has seen. Batches of a partition mostly share one schema
    object, so an identity check finds it before any comparison."""

    def __init__(self) -> None:
        self._by_fingerprint: dict[str, list[tuple[pa.Schema, int]]] = {}
        self.schemas: dict[int, pa.Schema] = {}

    def id_of(self, schema: pa.Schema, fingerprint: str) -> int:
        seen = self._by_fingerprint.setdefault(fingerprint, [])
        for known, number in seen:
            if known is schema or known.equals(schema, check_metadata=True):
                return number
        number = len(self.schemas)
        seen.append((schema, number))
        self.schemas[number] = schema
        return number


def encode_group(
    seq: int, appends: Sequence[Append], prepared: Sequence[Sequence[Prepared]], ids: SchemaIds
) -> Encoded:
    """The frame of one append group. `prepared`: each append's batches as the writer
    normalized them (what a replay appends again)."""
    chunks: list[Chunk] = [b"", _GROUP_HEAD.pack(KIND_GROUP, seq, len(appends))]
    named: list[int] = []
    for append, batches in zip(appends, prepared, strict=True):
        topic = append.topic.encode()
        producer = append.producer
        head = (
            _NO_PRODUCER
            if producer is None
            else (
                1,
                producer.producer_id,
                producer.epoch,
                producer.first_sequence,
                producer.last_sequence,
                producer.base_offset,
            )
        )
        advance = -1 if append.advance_to is None else append.advance_to
        chunks.append(_TOPIC_LEN.pack(len(topic)) + topic)
        chunks.append(_APPEND_HEAD.pack(append.partition, advance, *head, len(batches)))
        for item in batches:
            batch = item.batch
            if isinstance(batch, pa.RecordBatch):
                number = ids.id_of(batch.schema, item.fingerprint)
                named.append(number)
                message = batch.serialize()
                chunks.append(_BATCH_HEAD.pack(number, message.size))
                chunks.append(message)
                continue
            kind = batch.kind.encode()
            payload = list(batch.payload())
            size = _TOPIC_LEN.size + len(kind) + sum(map(_size, payload))
            chunks.append(_BATCH_HEAD.pack(LAZY, size) + _TOPIC_LEN.pack(len(kind)) + kind)
            chunks.extend(payload)
    crc = 0
    length = 0
    for chunk in chunks[1:]:
        crc = crc32c.crc32c(chunk, crc)
        length += _size(chunk)
    chunks[0] = FRAME.pack(length, crc)
    return Encoded(seq, chunks, length + FRAME.size, tuple(dict.fromkeys(named)))


def _size(chunk: Chunk) -> int:
    return chunk.size if isinstance(chunk, pa.Buffer) else memoryview(chunk).nbytes


def encode_schema(number: int, schema: pa.Schema) -> bytes:
    serialized: bytes = schema.serialize().to_pybytes()
    body = _SCHEMA_HEAD.pack(KIND_SCHEMA, number) + serialized
    return FRAME.pack(len(body), crc32c.crc32c(body)) + body


@dataclass(frozen=True)
class Group:
    seq: int
    appends: list[Append]


@dataclass(frozen=True)
class FileRead:
    """What a journal file held: its groups in order, and where reading it stopped short
    (None: it ended on a whole frame)."""

    groups: list[Group]
    torn_at: int | None = None
    torn_reason: str = ""


def read_file(data: pa.Buffer, name: str) -> FileRead:
    """Every whole group of one file. A frame that is cut short or fails its checksum ends
    the file (`torn_at`); whether that loses anything is for the caller to tell."""
    if data.size < len(MAGIC) or data.slice(0, len(MAGIC)).to_pybytes() != MAGIC:
        if data.size == 0 or MAGIC.startswith(data.to_pybytes()):
            return FileRead([], 0, "the file header is incomplete")  # a new file, torn
        if not any(data.to_pybytes()):
            # A new file whose header the crash left unwritten: its size reached the disk,
            # its bytes did not (nothing in it was synced, so nothing was acknowledged).
            return FileRead([], 0, "the file is all zeros")
        raise JournalCorruptError(f"journal file {name} does not start with {MAGIC!r}")
    schemas: dict[int, pa.Schema] = {}
    groups: list[Group] = []
    checksum = _checksum_of(data)
    at = len(MAGIC)
    while at < data.size:
        body = _frame_at(data, at, checksum)
        if isinstance(body, str):
            return FileRead(groups, at, body)
        try:
            kind = body.slice(0, 1).to_pybytes()[0]
            if kind == KIND_SCHEMA:
                (_, number) = _SCHEMA_HEAD.unpack(body.slice(0, _SCHEMA_HEAD.size).to_pybytes())
                schemas[number] = ipc.read_schema(body.slice(_SCHEMA_HEAD.size))
            elif kind == KIND_GROUP:
                groups.append(_group(body, schemas))
            else:
                raise JournalCorruptError(f"frame kind {kind}")
        except (ValueError, KeyError, struct.error, OSError, pa.ArrowException) as exc:
            # The checksum matched: these bytes are what was written, and they do not read.
            raise JournalCorruptError(
                f"journal file {name}: the frame at byte {at} does not read ({exc})"
            ) from exc
        at += FRAME.size + body.size
    return FileRead(groups)


def last_group(data: pa.Buffer) -> int | None:
    """The number of a file's last whole group (None: it holds none), found by walking its
    frames and their checksums without decoding them."""
    if data.size < len(MAGIC) or data.slice(0, len(MAGIC)).to_pybytes() != MAGIC:
        return None
    found = None
    checksum = _checksum_of(data)
    at = len(MAGIC)
    while at < data.size:
        body = _frame_at(data, at, checksum)
        if isinstance(body, str) or body.size < _GROUP_HEAD.size:
            break
        kind, seq, _ = _GROUP_HEAD.unpack(body.slice(0, _GROUP_HEAD.size).to_pybytes())
        if kind == KIND_GROUP:
            found = seq
        at += FRAME.size + body.size
    return found


Checksum: TypeAlias = Callable[[pa.Buffer], int]


def _checksum_of(data: pa.Buffer) -> Checksum:
    """The checksum a file's frames carry, told by its first frame: CRC-32C, or zlib's CRC-32
    of a file an older plateau wrote. A file never mixes them (a restart writes new files),
    and a first frame matching neither is torn there as before."""
    at = len(MAGIC)
    if data.size - at >= FRAME.size:
        length, crc = FRAME.unpack(data.slice(at, FRAME.size).to_pybytes())
        if 0 < length <= data.size - at - FRAME.size:
            body = data.slice(at + FRAME.size, length)
            if crc32c.crc32c(body) != crc and zlib.crc32(body) == crc:
                return zlib.crc32
    return crc32c.crc32c


def _frame_at(data: pa.Buffer, at: int, checksum: Checksum) -> pa.Buffer | str:
    """The body of the whole frame at byte `at`, checksum checked, or why there is none
    there (what ends a file as a torn tail)."""
    if data.size - at < FRAME.size:
        return "a frame header is cut short"
    length, crc = FRAME.unpack(data.slice(at, FRAME.size).to_pybytes())
    if length == 0:
        # No frame is empty. Zeros are what some filesystems show of a file's end that a
        # crash left unwritten (and the checksum of nothing is zero too).
        return "the file ends in zeros"
    if data.size - at - FRAME.size < length:
        return f"a frame of {length} bytes is cut short"
    body = data.slice(at + FRAME.size, length)
    if checksum(body) != crc:
        return "a frame's checksum does not match"
    return body


def _group(body: pa.Buffer, schemas: dict[int, pa.Schema]) -> Group:
    _, seq, count = _GROUP_HEAD.unpack(body.slice(0, _GROUP_HEAD.size).to_pybytes())
    at = _GROUP_HEAD.size
    appends: list[Append] = []
    for _ in range(count):
        (topic_len,) = _TOPIC_LEN.unpack(body.slice(at, 2).to_pybytes())
        topic = body.slice(at + 2, topic_len).to_pybytes().decode()
        at += 2 + topic_len
        fields = _APPEND_HEAD.unpack(body.slice(at, _APPEND_HEAD.size).to_pybytes())
        at += _APPEND_HEAD.size
        partition, advance, has_producer, pid, epoch, first, last, base, batches = fields
        found: list[Item] = []
        for _ in range(batches):
            number, length = _BATCH_HEAD.unpack(body.slice(at, _BATCH_HEAD.size).to_pybytes())
            at += _BATCH_HEAD.size
            if number == LAZY:
                (kind_len,) = _TOPIC_LEN.unpack(body.slice(at, 2).to_pybytes())
                kind = body.slice(at + 2, kind_len).to_pybytes().decode()
                start = at + 2 + kind_len
                found.append(load(kind, body.slice(start, length - 2 - kind_len)))
            else:
                rows = ipc.read_record_batch(body.slice(at, length), schemas[number])
                # Checked through: offsets pointing outside the buffers would be read later.
                rows.validate(full=True)
                found.append(rows)
            at += length
        appends.append(
            Append(
                topic,
                partition,
                tuple(found),
                ProducerBatch(pid, epoch, first, last, base) if has_producer else None,
                None if advance < 0 else advance,
            )
        )
    if at != body.size:
        raise ValueError(f"{body.size - at} bytes after the group's last append")
    return Group(seq, appends)


def groups_in_order(reads: Iterable[tuple[str, FileRead]]) -> Iterator[Group]:
    """The groups of a journal's files (oldest first) in sequence order, once each.

    A group can be in two files (rewritten after a failed sync); a file may end torn where
    a crash or a failed write stopped it. What must hold is that the sequence numbers have no
    gap: a gap is a group that was written, possibly acknowledged, and cannot be read.
    """
    last: int | None = None
    first: int | None = None
    for index, (name, read) in enumerate(reads):
        if index == 0:
            # A file is named by its first group: the oldest one reading none of its own
            # (emptied, zeroed, damaged from its start) has lost them, which the next
            # file's groups would not show otherwise.
            first = _named_first(name)
        for group in read.groups:
            if last is not None and group.seq <= last:
                continue
            expected = last + 1 if last is not None else first
            if expected is not None and group.seq > expected:
                raise JournalCorruptError(
                    f"journal file {name}: groups {expected}..{group.seq - 1} are missing "
                    "(an earlier file is damaged); move the journal folder aside to start "
                    "without them"
                )
            last = group.seq
            yield group


def _named_first(name: str) -> int | None:
    """The first group a file's name says it holds (None: not so named)."""
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None
