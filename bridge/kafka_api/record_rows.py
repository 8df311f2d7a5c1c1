"""The envelope columns (offset, timestamp, key, headers, value) of produced record batches,
built by compiled code (_record_rows.c) straight into Arrow buffers: no Python object per
record, and the interpreter lock let go while the records are parsed and copied. Reading every value
into a bytes object and handing lists of them to pyarrow cost 2.2 us per 1 KiB record, the
largest share of serve's time per record (docs/benchmarks.md, "What changed").

The same compiled reader checks every produced batch on arrival (`check_records`), walking
its records without building anything: aiokafka's reader reads varints and headers past the
end of its buffer on crafted input, so untrusted bytes are read by this one.

A compressed batch's records are undone here (bridge.kafka_api.codecs), one call per batch,
with a bound on what they expand to on arrival.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pyarrow as pa

from bridge.kafka_api import _record_rows
from bridge.kafka_api.codecs import NAMES, ExpansionError, decompress
from plateau_core.schema import HEADER_TYPE, HEADERS_TYPE, TIMESTAMP_TYPE

_ATTRIBUTES_AT = 22  # the low byte of the batch attributes: its codec in bits 0-2
# The v2 batch header's size: where the records (or their compressed form) start.
RECORDS_AT = 61
_CODEC_MASK = 0x07


class Placement(NamedTuple):
    """A batch's bytes, the offset plateau gave its first record and the times its records
    take (bridge.kafka_api.batches.Placed)."""

    data: bytes | memoryview
    base_offset: int
    log_append_ms: int  # every record's timestamp (LogAppendTime); -1: the records' own
    now_ms: int  # the timestamp of records that carry none (-1)


class RecordColumns(NamedTuple):
    offsets: pa.Array
    timestamps: pa.Array
    keys: pa.Array
    headers: pa.Array
    values: pa.Array


class Checked(NamedTuple):
    """What the arrival check found of a batch's records."""

    records: int  # the records read
    newest: int  # their newest timestamp; -1 when there are none
    records_bytes: int  # the records region's size, decompressed: what the seal reads


def records_region(data: bytes | memoryview, limit: int | None = None) -> bytes | None:
    """A compressed batch's records, undone; None for an uncompressed batch (its records
    are read where they are). Raises ExpansionError when they expand past `limit` bytes
    (None: no limit, for bytes already checked), ValueError when its codec is not one
    Kafka has or its records do not decompress."""
    if len(data) < RECORDS_AT:
        raise ValueError(f"a batch of {len(data)} bytes is shorter than its header")
    codec = data[_ATTRIBUTES_AT] & _CODEC_MASK
    if codec == 0:
        return None
    if codec not in NAMES:
        raise ValueError(f"the batch's codec {codec} is not one Kafka has")
    try:
        return decompress(codec, bytes(memoryview(data)[RECORDS_AT:]), limit)
    except ExpansionError:
        raise
    except Exception as exc:  # each codec library has its own errors (zlib, cramjam, EOF)
        raise ValueError(
            f"the records do not decompress ({NAMES[codec]}_decode): {type(exc).__name__}: {exc}"
        ) from exc


def check_records(data: bytes | memoryview, limit: int | None) -> Checked:
    """Every record of one batch read and checked as a seal's build reads them, nothing
    built. Raises ExpansionError when the records expand past `limit` bytes, ValueError
    naming the record and field of anything that does not parse."""
    region = records_region(data, limit)
    count, newest = _record_rows.check(data, region)
    return Checked(count, newest, len(data) - RECORDS_AT if region is None else len(region))


def record_columns(batches: Sequence[Placement]) -> RecordColumns:
    """The columns of all of `batches`' records, in order. Raises ValueError naming the
    batch, record and field when one does not parse."""
    built = _record_rows.build(
        [
            (b.data, records_region(b.data), b.base_offset, b.log_append_ms, b.now_ms)
            for b in batches
        ],
        pa.allocate_buffer,
    )
    rows, headers = built["rows"], built["headers"]
    pairs = pa.StructArray.from_arrays(
        [
            pa.Array.from_buffers(
                pa.string(), headers, [None, built["hkey_offsets"], built["hkey_data"]], 0
            ),
            pa.Array.from_buffers(
                pa.binary(),
                headers,
                [built["hvalue_valid"], built["hvalue_offsets"], built["hvalue_data"]],
                built["header_value_nulls"],
            ),
        ],
        fields=list(HEADER_TYPE),
    )
    return RecordColumns(
        pa.Array.from_buffers(pa.int64(), rows, [None, built["offsets"]], 0),
        pa.Array.from_buffers(TIMESTAMP_TYPE, rows, [None, built["timestamps"]], 0),
        pa.Array.from_buffers(
            pa.binary(),
            rows,
            [built["key_valid"], built["key_offsets"], built["key_data"]],
            built["key_nulls"],
        ),
        # A record without headers has null ones, as the envelope has always had them.
        pa.Array.from_buffers(
            HEADERS_TYPE,
            rows,
            [built["list_valid"], built["list_offsets"]],
            built["headerless"],
            children=[pairs],
        ),
        pa.Array.from_buffers(
            pa.binary(),
            rows,
            [built["value_valid"], built["value_offsets"], built["value_data"]],
            built["value_nulls"],
        ),
    )
