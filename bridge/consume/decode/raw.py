"""`format: raw`: the value is kept as bytes; nothing can fail to decode."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from confluent_kafka import Message

from bridge.consume.decode.common import Decoded, Envelope, envelope_columns


class RawDecoder:
    def __init__(self, envelope: Envelope) -> None:
        self.envelope = envelope

    def seed(self, stored: pa.Schema) -> None:
        """Nothing to learn: the columns of a raw topic never change."""

    def decode(self, messages: Sequence[Message]) -> Decoded:
        if not messages:
            return Decoded()
        columns = envelope_columns(messages, self.envelope)
        columns["value"] = pa.array(list(map(Message.value, messages)), pa.binary())
        return Decoded(batches=[pa.RecordBatch.from_pydict(columns)])
