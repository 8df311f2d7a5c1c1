"""Produced record batches of raw topics, handed to the writer as they came: their Arrow rows
are built when the partition seals, every batch of the seal at once (plateau_core.lazy).

A raw topic's rows are the envelope itself (offset, timestamp, key, headers, value), so
nothing can fail after the batch was read and checked on arrival: building them later is
the same as building them now, minus a handful of array builds per produced batch, which
was most of the listener's time under the Java client's small batches
(docs/benchmarks.md, the Kafka API). The journal keeps the batch's own bytes with the
offsets and times it was given; a replay reads them again the same way.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import cache
from typing import ClassVar

import pyarrow as pa

from bridge.ingest.records import ENVELOPE, VALUE, Kept, kept_columns
from bridge.kafka_api.batches import Placed, envelope_of, read_batch
from plateau_core import lazy
from plateau_core.schema import normalized

KIND = "kafka-record-batch-v2"
# base offset | LogAppendTime (-1: the records' own) | the time for records without one |
# keep key | keep headers
_HEAD = struct.Struct("<qqqBB")
# What a batch's Python objects (it, its placing, this) hold beyond its bytes.
_BATCH_OVERHEAD = 512
_BATCH_HEADER = 61  # before the records


class KafkaRecords:
    """One produced batch of a raw topic, at the offsets it was given. Its figures are worked
    out once: the writer asks for them several times per batch."""

    kind: ClassVar[str] = KIND
    __slots__ = (
        "_placed",
        "fingerprint",
        "first_offset",
        "kept",
        "last_offset",
        "nbytes",
        "num_rows",
        "schema",
    )

    def __init__(self, placed: Placed, kept: Kept) -> None:
        self._placed = placed
        self.kept = kept
        batch = placed.batch
        self.num_rows = batch.count
        self.first_offset = placed.base_offset
        self.last_offset = placed.base_offset + batch.count - 1
        # Counted by its records decompressed, though it is held as it came: the seal
        # builds from them (and holds them, decompressed, while it does), and a batch of
        # well-compressed records is many times its size. The memory budget, the
        # throttling and the seal's pieces all go by this figure.
        self.nbytes = _BATCH_HEADER + batch.records_bytes + _BATCH_OVERHEAD
        self.schema, self.fingerprint = _normal(kept.key, kept.headers)

    def payload(self) -> Sequence[bytes | memoryview]:
        placed = self._placed
        head = _HEAD.pack(
            placed.base_offset,
            placed.log_append_ms,
            placed.now_ms,
            self.kept.key,
            self.kept.headers,
        )
        return [head, placed.batch.data]

    @classmethod
    def build(cls, items: Sequence[lazy.LazyRecords]) -> pa.RecordBatch:
        found = [item for item in items if isinstance(item, KafkaRecords)]
        if len(found) != len(items) or len({item.kept for item in found}) != 1:
            raise TypeError("KafkaRecords.build takes KafkaRecords of one topic only")
        return _rows(envelope_of([item._placed for item in found]), found[0].kept)

    @classmethod
    def load(cls, payload: pa.Buffer) -> KafkaRecords:
        base, appended, now, key, headers = _HEAD.unpack(payload.slice(0, _HEAD.size).to_pybytes())
        # No limit on what its records expand to: the batch was checked under the limit in
        # force when it came, and was acknowledged; a lower limit since must not lose it.
        batch = read_batch(payload.slice(_HEAD.size).to_pybytes(), None)
        return cls(Placed(batch, base, appended, now), Kept(bool(key), bool(headers)))


def _rows(records: pa.RecordBatch, kept: Kept) -> pa.RecordBatch:
    """A raw topic's rows of an envelope (what RawDecoder and normalized make of it)."""
    columns = kept_columns(records, kept)
    columns[VALUE] = records.column(VALUE)
    schema = _normal(kept.key, kept.headers)[0]
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


@cache
def _normal(key: bool, headers: bool) -> tuple[pa.Schema, str]:
    """The schema (and its fingerprint) a raw topic's rows get: worked out from an empty
    envelope, so it is the schema the eager path gives them, by construction. Cached by
    plain flags, not by Kept, whose dataclass hash and equality were most of a produced
    batch's KafkaRecords."""
    kept = Kept(key, headers)
    empty = ENVELOPE.empty_table().to_batches() or [pa.RecordBatch.from_pylist([], ENVELOPE)]
    columns = kept_columns(empty[0], kept)
    columns[VALUE] = empty[0].column(VALUE)
    batch, fingerprint = normalized(pa.RecordBatch.from_pydict(columns))
    return batch.schema, fingerprint


lazy.register(KIND, KafkaRecords.load)
