"""The check of a produced batch on arrival (`read_batch`): every record read by plateau's own
bounds-checked reader, which never reads past the batch, and what it keeps of them (the
count, the newest timestamp) as aiokafka's reader gave them."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import crc32c
import pytest

from bridge.kafka_api.batches import CorruptBatchError, InvalidBatchError, read_batch
from tests.kafka_api.raw_batches import Record, batch_of, raw_batch, varint

FIRST = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]

# A batch that ends where readable memory ends: a read past its last byte faults.
AT_A_GUARD_PAGE = textwrap.dedent(
    """
    import ctypes, mmap, sys

    from bridge.kafka_api.batches import CorruptBatchError, read_batch

    data = bytes.fromhex(sys.argv[1])
    page = mmap.PAGESIZE
    memory = mmap.mmap(-1, 2 * page)
    start = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(start + page, page, 0) != 0:  # PROT_NONE
        sys.exit("mprotect failed")
    memory[page - len(data) : page] = data
    try:
        read_batch(memoryview(memory)[page - len(data) : page])
    except CorruptBatchError as exc:
        print(exc)
    """
)


def one_record(body: bytes, claimed: int | None = None) -> bytes:
    return batch_of(varint(len(body) if claimed is None else claimed) + body, 1)


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (batch_of(b"\x80", 1), "the record length runs past the end"),
        (one_record(b"\x00\x02\x00\xd0", claimed=10), "the key length runs past the end"),
        (one_record(b"\x00\x00\x00\x01\x01" + varint(1000)), "1000 headers, with 0 bytes left"),
        (one_record(b"\x00\x00\x00\x01\x01\x02" + varint(40) + b"ab"), "header key claims 40"),
        (one_record(b"\x00\x00\x00\x01\x01\x02\x02h\xd0"), "header value length runs past"),
    ],
    ids=["record-length", "key-length", "header-count", "header-key", "header-value-length"],
)
def test_a_crafted_batch_at_the_end_of_readable_memory_is_refused_without_reading_past_it(
    data: bytes, named: str
) -> None:
    """aiokafka's reader read varints and headers past the end of its buffer (the process
    died here of a segmentation fault); the check reads only the batch's bytes."""
    run = subprocess.run(
        [sys.executable, "-c", AT_A_GUARD_PAGE, data.hex()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert named in run.stdout


def test_the_newest_timestamp_is_the_records_own() -> None:
    deltas = [5, -3, 900, 0]
    batch = read_batch(raw_batch([Record(d, None, b"v") for d in deltas], first_timestamp=FIRST))
    assert (batch.count, batch.newest) == (4, FIRST + 900)
    # Times before 1970 are kept as Kafka keeps them: the newest may be below -1.
    early = read_batch(raw_batch([Record(-FIRST - 7, None, b"v")], first_timestamp=FIRST))
    assert early.newest == -7
    # LogAppendTime: every record's time is the header's max_timestamp.
    appended = read_batch(raw_batch([Record(d, None, b"v") for d in deltas], log_append_time=True))
    assert appended.newest == FIRST


def recrc(data: bytes | bytearray) -> bytes:
    changed = bytearray(data)
    struct.pack_into(">I", changed, 17, crc32c.crc32c(bytes(changed[21:])))
    return bytes(changed)


def with_header(data: bytes, at: int, layout: str, value: int) -> bytes:
    changed = bytearray(data)
    struct.pack_into(layout, changed, at, value)
    return recrc(changed)


def test_a_negative_record_count_reads_no_records_and_is_refused_as_aiokafka_refused_it() -> None:
    empty = batch_of(b"", 1)
    with pytest.raises(InvalidBatchError, match="holds 0 records; its header says 1"):
        read_batch(with_header(empty, 57, ">i", -5))
    full = raw_batch([Record(0, None, b"v")])
    with pytest.raises(CorruptBatchError, match="bytes are left after the batch's 0 records"):
        read_batch(with_header(full, 57, ">i", -5))


def test_a_codec_that_does_not_decompress_is_corrupt_naming_the_codec() -> None:
    data = bytearray(raw_batch([Record(0, None, b"v" * 100)], codec=4))
    data[-10:] = b"\x00" * 10  # the zstd frame's end
    with pytest.raises(CorruptBatchError, match="do not decompress \\(zstd_decode\\)"):
        read_batch(recrc(data))


def test_a_batch_long_enough_to_be_read_without_the_interpreter_lock_reads_alike() -> None:
    records = [Record(i % 7, b"k" if i % 2 else None, b"v" * (i % 50)) for i in range(5000)]
    batch = read_batch(raw_batch(records, first_timestamp=FIRST))
    assert (batch.count, batch.newest) == (5000, FIRST + 6)
