"""Why the Kafka API reads record batches with aiokafka's record module and not kio's: time
per record to read (CRC check, decompression, every field) a 1000-record batch of 128-byte
values, per codec, with both. kio's record reader is pure Python and takes uncompressed
batches only. Then the CRC check alone, aiokafka's validate_crc against the crc32c
package's (hardware CRC-32C), on a 16 KiB batch as the Java client sends them.

    .venv/bin/python bench/record_batch_probe.py
"""

from __future__ import annotations

import time

import crc32c
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kio.records.readers import read_batch

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
RECORDS = 1000
ROUNDS = 50


def batch(codec: int, records: int = RECORDS) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        batch_size=1 << 30,
    )
    for i in range(records):
        builder.append(
            i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"x" * 128, headers=[]
        )
    return bytes(builder.build())


def per_record_us(read: object, data: bytes) -> float:
    started = time.perf_counter()
    for _ in range(ROUNDS):
        read(data)  # type: ignore[operator]
    return (time.perf_counter() - started) / (ROUNDS * RECORDS) * 1e6


def with_aiokafka(data: bytes) -> int:
    found = DefaultRecordBatch(data)
    assert found.validate_crc()
    return sum(len(r.value) for r in found)


def with_kio(data: bytes) -> int:
    found, _ = read_batch(data, 0)
    return sum(len(r.value or b"") for r in found.records)


def crc_us(check: object, data: bytes, rounds: int = 5000) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        assert check(data)  # type: ignore[operator]
    return (time.perf_counter() - started) / rounds * 1e6


def aiokafka_crc(data: bytes) -> bool:
    return bool(DefaultRecordBatch(data).validate_crc())


def crc32c_crc(data: bytes) -> bool:
    # The CRC-32C field (bytes 17..21) covers the batch from its attributes (byte 21) on.
    return crc32c.crc32c(memoryview(data)[21:]) == int.from_bytes(data[17:21], "big")


def main() -> None:
    print(f"{'codec':8} {'aiokafka us/record':>20} {'kio us/record':>15}")
    for codec, name in CODECS.items():
        data = batch(codec)
        ours = per_record_us(with_aiokafka, data)
        theirs = per_record_us(with_kio, data) if codec == 0 else float("nan")
        print(f"{name:8} {ours:20.3f} {theirs:15.3f}")
    small = batch(0, records=110)  # about 16 KiB, the Java client's batch.size
    print(
        f"CRC check of a {len(small)}-byte batch: aiokafka validate_crc "
        f"{crc_us(aiokafka_crc, small):.2f} us, crc32c {crc_us(crc32c_crc, small):.2f} us"
    )


if __name__ == "__main__":
    main()
