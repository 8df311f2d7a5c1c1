"""What a compressed produced batch may expand to (kafka_api.max_uncompressed_batch_bytes):
a batch within message_max_bytes whose records are a decompression bomb is refused with
MESSAGE_TOO_LARGE before its records are decompressed whole, while batches of every codec
that stay within the limit land and decompress as aiokafka's codec functions decompress
them."""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest
from aiokafka.codec import (
    gzip_decode,
    gzip_encode,
    lz4_decode,
    lz4_encode,
    snappy_decode,
    snappy_encode,
    zstd_decode,
    zstd_encode,
)
from kio.schema.errors import ErrorCode

from bridge.errors import ConfigError
from bridge.kafka_api.batches import OversizedBatchError, read_batch
from bridge.kafka_api.codecs import ExpansionError, decompress
from tests.kafka_api.raw_batches import batch_of
from tests.kafka_api.support import (
    RawClient,
    api_config,
    listening,
    produce_body,
    record_batch,
    stored,
)

PRODUCE = 0
GIB = 1 << 30
ENCODE = {1: gzip_encode, 2: snappy_encode, 3: lz4_encode, 4: zstd_encode}
DECODE = {1: gzip_decode, 2: snappy_decode, 3: lz4_decode, 4: zstd_decode}


def gzip_bomb(expanded: int) -> bytes:
    """`expanded` zero bytes gzip'd, a MiB of them at a time (about 1/1000 of it)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    parts = [deflate.compress(zeros) for _ in range(expanded >> 20)]
    return b"".join([*parts, deflate.flush()])


def zstd_bomb(expanded: int) -> bytes:
    """A zstd frame of RLE blocks, 128 KiB of zeros in 4 bytes each, with no content size
    declared (as a streaming compressor writes it): 16 GiB in 512 KiB."""
    block = 128 << 10
    head = struct.pack("<IBB", 0xFD2FB528, 0x00, (17 - 10) << 3)  # window 128 KiB
    rle = ((block << 3) | (1 << 1)).to_bytes(3, "little") + b"\x00"
    last = ((block << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"\x00"
    return head + rle * (expanded // block - 1) + last


def produce(client: RawClient, records: bytes, partition: int = 0) -> object:
    response = client.call(PRODUCE, 9, produce_body("events", partition, records))
    return response.responses[0].partition_responses[0]


@pytest.mark.parametrize(
    ("codec", "bomb", "expanded"),
    [(1, gzip_bomb, GIB), (4, zstd_bomb, 16 * GIB)],
    ids=["gzip-1GiB", "zstd-16GiB"],
)
def test_a_decompression_bomb_is_refused_as_too_large_and_the_listener_carries_on(
    tmp_path: Path, codec: int, bomb: Callable[[int], bytes], expanded: int
) -> None:
    """Under message_max_bytes compressed; decompressed whole, gigabytes (the zstd one more
    than the machine has). Refused within the limit's worth of work, naming the sizes; the
    same connection's next batch and another partition's land."""
    records = bomb(expanded)
    data = batch_of(records, 1, codec=0)
    data = data[:22] + bytes([data[22] | codec]) + data[23:]  # the codec bits, CRC again
    data = data[:17] + struct.pack(">I", _crc(data)) + data[21:]
    limit = 16 << 20
    config = api_config(
        tmp_path / "store",
        message_max_bytes="2MiB",
        max_uncompressed_batch_bytes=f"{limit}",
    )
    assert len(data) < 2 << 20
    with listening(config) as (server, bootstrap):
        client = RawClient(bootstrap)
        started = time.monotonic()
        answer = produce(client, data)
        took = time.monotonic() - started
        assert answer.error_code == ErrorCode.message_too_large  # type: ignore[attr-defined]
        message = answer.error_message  # type: ignore[attr-defined]
        assert f"{len(records)} bytes of" in message
        assert f"max_uncompressed_batch_bytes is {limit}" in message
        # Decompressing a GiB and reading it took seconds; stopping at 16 MiB, a fraction.
        assert took < 5, took
        assert server.stats.records["events"] == 0
        ok = record_batch([b"ok"], codec=codec)
        assert produce(client, ok).error_code == ErrorCode.none  # type: ignore[attr-defined]
        other = RawClient(bootstrap)
        assert produce(other, ok, 1).error_code == ErrorCode.none  # type: ignore[attr-defined]
        client.close()
        other.close()
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"ok", b"ok"]


def _crc(data: bytes) -> int:
    return int(crc32c.crc32c(data[21:]))


def test_compressed_batches_of_every_codec_land(tmp_path: Path) -> None:
    values = [b"value-%d-" % i * (i % 40) for i in range(300)]
    with listening(api_config(tmp_path / "store")) as (_server, bootstrap):
        client = RawClient(bootstrap)
        for codec in (0, 1, 2, 3, 4):
            answer = produce(client, record_batch(values, codec=codec))
            assert answer.error_code == ErrorCode.none, codec  # type: ignore[attr-defined]
        client.close()
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == values * 5


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
@pytest.mark.parametrize("size", [1, 5000, 300_000, 2_000_000])
def test_records_decompress_as_aiokafka_decompresses_them_up_to_the_limit_exactly(
    codec: int, size: int
) -> None:
    """At the limit they read; one byte past it they are refused, for every codec (lz4's
    and zstd's block bounds are past the limit here: their blocks are undone to tell)."""
    raw = bytes(i * 7 % 251 for i in range(size // 2)) + bytes(size - size // 2)
    payload = ENCODE[codec](raw)
    assert decompress(codec, payload, size) == DECODE[codec](payload) == raw
    assert decompress(codec, payload, None) == raw
    with pytest.raises(ExpansionError, match=f"{len(payload)} bytes of"):
        decompress(codec, payload, size - 1)


@pytest.mark.parametrize(("codec", "told"), [(2, "expand to up to"), (3, "expand to more than")])
def test_snappy_and_lz4_bombs_are_refused(codec: int, told: str) -> None:
    """snappy's blocks say what they expand to: refused before any is undone. lz4's frames
    say what a block may hold at most; past the limit, its blocks are undone one at a time
    into what is left of it."""
    payload = ENCODE[codec](bytes(64 << 20))
    with pytest.raises(ExpansionError, match=told):
        decompress(codec, payload, 1 << 20)


def test_an_oversized_batch_is_refused_on_arrival_and_read_again_without_a_limit() -> None:
    """The journal's replay reads a batch checked on arrival with no limit: one acknowledged
    under a higher limit is not lost when it is lowered."""
    data = record_batch([bytes(4000)] * 100, codec=1)
    with pytest.raises(OversizedBatchError, match="expand to more than"):
        read_batch(data, 100_000)
    assert read_batch(data, None).count == 100


def test_the_limit_is_at_least_message_max_bytes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least message_max_bytes"):
        api_config(tmp_path, message_max_bytes="8MiB", max_uncompressed_batch_bytes="4MiB")
    with pytest.raises(ConfigError, match="less than or equal to 2147483647"):
        api_config(tmp_path, max_uncompressed_batch_bytes="4GiB")
    assert api_config(tmp_path).kafka_api.max_uncompressed_batch_bytes == 64 << 20
