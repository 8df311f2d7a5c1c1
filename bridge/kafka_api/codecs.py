"""A compressed record batch's records undone with a bound on what they may expand to.

A produced batch is refused above kafka_api.message_max_bytes by its compressed size, and
a megabyte of gzip'd zeros is a gigabyte of records (of zstd's, tens of gigabytes):
decompressed whole, one small request would take the listener's memory, on arrival and
again at the seal. Each codec is undone here with its output bounded, accepting what
aiokafka's codec functions accept and giving what they give:

- gzip: zlib's streaming decompressor with a maximum output, members, CRC, length and
  zero padding read as Python's GzipFile reads them (what aiokafka's gzip_decode is);
- snappy: each block's uncompressed length is in its preamble, summed before any block is
  undone (the decoder allocates what the preamble claims);
- lz4 and zstd: the frames' block headers bound the output before anything is allocated
  (a block holds at most its frame's block size; zstd's RLE and raw blocks say theirs),
  and cramjam undoes them as before. Frames the walk bounds past the limit are undone in
  pieces first, stopping past it (lz4's independent blocks one at a time into what is
  left of the limit, zstd by python-zstandard's streaming reader), so only a batch that
  really expands past it is refused.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import NamedTuple

import cramjam
import zstandard

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
NAMES = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}


class ExpansionError(ValueError):
    """Records that expand past the limit (what they expand to, at least, is named)."""

    def __init__(self, codec: int, compressed: int, expanded: int, limit: int, *, bound: bool):
        self.expanded, self.limit = expanded, limit
        size = f"up to {expanded}" if bound else f"more than {expanded - 1}"
        super().__init__(
            f"{compressed} bytes of {NAMES[codec]} records expand to {size} bytes; "
            f"kafka_api.max_uncompressed_batch_bytes is {limit}"
        )


def decompress(codec: int, payload: bytes, limit: int | None) -> bytes:
    """The records `payload` (a batch's compressed region) holds; ExpansionError when they
    expand past `limit` bytes (None: no limit), any other error when they do not decompress."""
    return _DECODERS[codec](payload, limit)


# gzip, as Python's gzip module reads it (header flags and their fields)
_GZIP_MAGIC = b"\x1f\x8b"
_DEFLATED = 8
_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 2, 4, 8, 16
_GZIP_HEAD = struct.Struct("<BBIxx")  # method, flags, mtime, extra flags, OS
_GZIP_TRAILER = struct.Struct("<II")  # CRC-32, length mod 2**32


def _gzip(payload: bytes, limit: int | None) -> bytes:
    """GzipFile.read()'s members, trailers and zero padding, each member's deflate stream
    undone with at most what is left of the limit (plus one byte, to tell it was passed)."""
    view = memoryview(payload)
    out: list[bytes] = []
    total, at = 0, 0
    while at < len(view):
        at = _gzip_header(view, at)
        inflate = zlib.decompressobj(-zlib.MAX_WBITS)
        room = 0 if limit is None else limit - total + 1
        chunk = inflate.decompress(view[at:], room)
        total += len(chunk)
        if limit is not None and total > limit:
            raise ExpansionError(GZIP, len(payload), total, limit, bound=False)
        if not inflate.eof:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        rest = inflate.unused_data
        if len(rest) < _GZIP_TRAILER.size:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        crc, size = _GZIP_TRAILER.unpack_from(rest)
        if crc != zlib.crc32(chunk):
            raise zlib.error(f"CRC check failed {crc:#x} != {zlib.crc32(chunk):#x}")
        if size != len(chunk) & 0xFFFFFFFF:
            raise zlib.error("Incorrect length of data produced")
        out.append(chunk)
        at = len(view) - len(rest) + _GZIP_TRAILER.size
        while at < len(view) and view[at] == 0:  # members may be padded with zeros
            at += 1
    return out[0] if len(out) == 1 else b"".join(out)


def _gzip_header(view: memoryview, at: int) -> int:
    """Where the deflate stream of the member at `at` starts."""
    if view[at : at + 2] != _GZIP_MAGIC:
        raise zlib.error(f"Not a gzipped file ({bytes(view[at : at + 2])!r})")
    if len(view) - at < 2 + _GZIP_HEAD.size:
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    method, flags, _mtime = _GZIP_HEAD.unpack_from(view, at + 2)
    if method != _DEFLATED:
        raise zlib.error("Unknown compression method")
    at += 2 + _GZIP_HEAD.size
    if flags & _FEXTRA:
        if len(view) - at < 2:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        at += 2 + int.from_bytes(view[at : at + 2], "little")
        if at > len(view):
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    for flag in (_FNAME, _FCOMMENT):
        if flags & flag:  # a zero-terminated string; GzipFile stops at the end unterminated
            end = bytes(view[at:]).find(b"\x00")
            at = len(view) if end < 0 else at + end + 1
    if flags & _FHCRC:
        at += 2
        if at > len(view):
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    return at


# snappy: aiokafka's xerial framing (a header, then blocks of a length and raw snappy)
_XERIAL = struct.Struct("!bccccccBii")
_XERIAL_HEADER = (-126, b"S", b"N", b"A", b"P", b"P", b"Y", 0, 1, 1)
_BLOCK_LENGTH = struct.Struct("!i")


def _snappy(payload: bytes, limit: int | None) -> bytes:
    """aiokafka's snappy_decode, each block's claimed length added up before it is undone."""
    view = memoryview(payload)
    if not (len(view) > _XERIAL.size and _XERIAL.unpack_from(view) == _XERIAL_HEADER):
        return _snappy_block(view, len(payload), 0, limit)
    blocks = view[_XERIAL.size :]
    out: list[bytes] = []
    total = cursor = 0
    while cursor < len(blocks):
        (size,) = _BLOCK_LENGTH.unpack_from(blocks[cursor:])
        cursor += _BLOCK_LENGTH.size
        if size <= 0:
            # aiokafka's loop reads an empty block here, which does not decompress (and
            # would step back to read the same bytes again if it did)
            raise ValueError(f"a snappy block of {size} bytes")
        out.append(_snappy_block(blocks[cursor : cursor + size], len(payload), total, limit))
        total += len(out[-1])
        cursor += size
    return b"".join(out)


def _snappy_block(block: memoryview, compressed: int, before: int, limit: int | None) -> bytes:
    if limit is not None:
        claimed = before + cramjam.snappy.decompress_raw_len(block)
        if claimed > limit:
            raise ExpansionError(SNAPPY, compressed, claimed, limit, bound=True)
    return bytes(cramjam.snappy.decompress_raw(block))


# lz4 and zstd frames, walked for the most their blocks may hold
_LE32 = struct.Struct("<I")
_SKIPPABLE, _SKIPPABLE_MASK = 0x184D2A50, 0xFFFFFFF0
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_SIZES = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_LZ4_UNCOMPRESSED = 0x80000000
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 << 10
_ZSTD_RAW, _ZSTD_RLE, _ZSTD_COMPRESSED = 0, 1, 2


class _FrameError(ValueError):
    """A frame whose blocks do not read: the decoder says why."""


class _Lz4Block(NamedTuple):
    data: memoryview
    most: int  # what it may decompress to: its frame's block size, or its own when stored
    stored: bool  # kept uncompressed


def _lz4(payload: bytes, limit: int | None) -> bytes:
    if limit is not None:
        # A frame that does not walk is refused here, not handed to the decoder: it would
        # undo every block before the one that does not read.
        try:
            most, independent = _lz4_walk(payload, None)
        except (_FrameError, struct.error, IndexError) as exc:
            raise ValueError(f"the lz4 frames do not read: {exc}") from exc
        if most > limit:
            if not independent:  # blocks that refer to earlier ones are not undone alone
                raise ExpansionError(LZ4, len(payload), most, limit, bound=True)
            _lz4_expanded(payload, limit)
    return bytes(cramjam.lz4.decompress(payload))


def _lz4_expanded(payload: bytes, limit: int) -> None:
    """Refuses frames whose blocks hold more than `limit` bytes, undoing them one at a time
    into at most what is left of it: a frame's last block is seldom full, so the bound may
    be past the limit when the records are not."""
    blocks: list[_Lz4Block] = []
    _lz4_walk(payload, blocks)
    expanded = 0
    for block in blocks:
        if block.stored:
            expanded += block.most
        else:
            room = bytearray(min(block.most, limit - expanded + 1))
            try:
                expanded += cramjam.lz4.decompress_block_into(block.data, room)
            except cramjam.DecompressionError:
                expanded += len(room)  # more than the room left, or not lz4: refused alike
        if expanded > limit:
            raise ExpansionError(LZ4, len(payload), expanded, limit, bound=False)


def _lz4_walk(payload: bytes, blocks: list[_Lz4Block] | None) -> tuple[int, bool]:
    """The most the frames' blocks may decompress to, and whether every frame's blocks are
    independent; each data block appended to `blocks` when it is a list."""
    unpack, at, most, independent = _LE32.unpack_from, 0, 0, True
    while at < len(payload):
        (magic,) = unpack(payload, at)
        at += 4
        if magic & _SKIPPABLE_MASK == _SKIPPABLE:
            at += 4 + unpack(payload, at)[0]
            continue
        if magic != _LZ4_MAGIC or len(payload) - at < 3:
            raise _FrameError("not an lz4 frame")
        flags, block_max = payload[at], _LZ4_BLOCK_SIZES.get((payload[at + 1] >> 4) & 7)
        if block_max is None:
            raise _FrameError("an unknown block size")
        independent = independent and bool(flags & 0x20)
        at += 2 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1
        checksummed = 4 if flags & 0x10 else 0
        while size := unpack(payload, at)[0]:
            at += 4
            length = size & ~_LZ4_UNCOMPRESSED
            stored = size != length
            most += length if stored else block_max
            if blocks is not None:
                block = memoryview(payload)[at : at + length]
                blocks.append(_Lz4Block(block, length if stored else block_max, stored))
            at += length + checksummed
        at += 4 + (4 if flags & 0x04 else 0)  # the end mark, the content checksum
    if at > len(payload):
        raise _FrameError("the frame runs past the end")
    return most, independent


def _zstd(payload: bytes, limit: int | None) -> bytes:
    if limit is not None:
        try:
            most: int | None = _zstd_bound(payload)
        except (_FrameError, struct.error, IndexError):
            most = None
        if most is None or most > limit:
            # The walk's bound is past the limit (or the frames do not walk): what they
            # really expand to, in pieces, stopping past the limit.
            expanded = 0
            for piece in zstandard.ZstdDecompressor().read_to_iter(payload, write_size=1 << 20):
                expanded += len(piece)
                if expanded > limit:
                    raise ExpansionError(ZSTD, len(payload), expanded, limit, bound=False)
    return bytes(cramjam.zstd.decompress(payload))


def _zstd_bound(payload: bytes) -> int:
    """The most the frames' blocks may decompress to (a frame's declared content size when
    it has one: the decoder refuses a frame that holds another)."""
    unpack, at, most = _LE32.unpack_from, 0, 0
    while at < len(payload):
        (magic,) = unpack(payload, at)
        at += 4
        if magic & _SKIPPABLE_MASK == _SKIPPABLE:
            at += 4 + unpack(payload, at)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise _FrameError("not a zstd frame")
        descriptor = payload[at]
        single = descriptor & 0x20
        content_bytes = (1 if single else 0, 2, 4, 8)[descriptor >> 6]
        at += 1 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]
        declared = int.from_bytes(payload[at : at + content_bytes], "little")
        if content_bytes == 2:
            declared += 256
        at += content_bytes
        blocks = 0
        last = 0
        while not last:
            if at + 3 > len(payload):
                raise _FrameError("a block header runs past the end")
            header = payload[at] | payload[at + 1] << 8 | payload[at + 2] << 16
            at += 3
            kind, size, last = (header >> 1) & 3, header >> 3, header & 1
            if kind == _ZSTD_RAW:
                blocks += size
                at += size
            elif kind == _ZSTD_RLE:
                blocks += size
                at += 1
            elif kind == _ZSTD_COMPRESSED:
                blocks += _ZSTD_BLOCK_MAX
                at += size
            else:
                raise _FrameError("a reserved block type")
        most += min(blocks, declared) if content_bytes else blocks
        at += 4 if descriptor & 0x04 else 0
    if at > len(payload):
        raise _FrameError("the frame runs past the end")
    return most


_DECODERS: dict[int, Callable[[bytes, int | None], bytes]] = {
    GZIP: _gzip,
    SNAPPY: _snappy,
    LZ4: _lz4,
    ZSTD: _zstd,
}
