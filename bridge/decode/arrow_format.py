"""`format: arrow`: each message value is an Arrow IPC stream of many rows.

The columnar fast path: producers that already hold Arrow data send it as is, and every
row keeps its message's offset and timestamp (and key and headers, when kept).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from confluent_kafka import Message

from bridge.decode.common import Decoded, Envelope, Poison, envelope_columns
from bridge.decode.json_format import RESERVED, event_times
from plateau_core.schema import TIMESTAMP_TYPE


class ArrowDecoder:
    def __init__(self, envelope: Envelope, timestamp_field: str | None = None) -> None:
        self.envelope = envelope
        self.timestamp_field = timestamp_field

    def decode(self, messages: Sequence[Message]) -> Decoded:
        result = Decoded()
        for message in messages:
            try:
                table = _read_stream(message.value())
            except (pa.ArrowException, ValueError) as exc:
                result.poison.append(Poison(message, f"not an Arrow IPC stream: {exc}"))
                continue
            if table.num_rows == 0:
                continue
            clash = [n for n in table.column_names if n in RESERVED]
            if clash:
                result.poison.append(Poison(message, f"columns {clash} shadow plateau's own"))
                continue
            timestamps = None
            if self.timestamp_field is not None:
                timestamps, bad = event_times(table, self.timestamp_field)
                if bad:
                    result.poison.append(Poison(message, next(iter(bad.values()))))
                    continue
            result.batches.extend(self._rows(message, table, timestamps))
        return _merge_runs(result)

    def _rows(
        self, message: Message, table: pa.Table, timestamps: pa.Array | None
    ) -> list[pa.RecordBatch]:
        n = table.num_rows
        envelope = envelope_columns([message], self.envelope)
        columns: dict[str, pa.Array] = {name: _repeat(array, n) for name, array in envelope.items()}
        if timestamps is not None:
            columns["timestamp"] = timestamps
        for name in table.column_names:
            columns[name] = table.column(name).combine_chunks()
        return [pa.RecordBatch.from_pydict(columns)]


def _read_stream(value: bytes | None) -> pa.Table:
    if value is None:
        raise ValueError("null value (tombstone)")
    with pa.ipc.open_stream(pa.py_buffer(value)) as reader:
        table = reader.read_all()
    table.validate(full=True)
    return table


def _repeat(array: pa.Array, n: int) -> pa.Array:
    return array.take(pa.array([0] * n, pa.int32())) if n != 1 else array


def _merge_runs(result: Decoded) -> Decoded:
    """Neighbouring batches of one schema become one batch (fewer, larger appends)."""
    merged: list[pa.RecordBatch] = []
    run: list[pa.RecordBatch] = []
    for batch in result.batches:
        if run and not batch.schema.equals(run[0].schema):
            merged.append(pa.Table.from_batches(run).combine_chunks().to_batches()[0])
            run = []
        run.append(batch)
    if run:
        merged.append(pa.Table.from_batches(run).combine_chunks().to_batches()[0])
    result.batches = merged
    return result


__all__ = ["TIMESTAMP_TYPE", "ArrowDecoder"]
