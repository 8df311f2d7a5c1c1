"""`format: raw`: the value is kept as bytes; nothing can fail to decode."""

from __future__ import annotations

import pyarrow as pa

from bridge.ingest.decode.common import Decoded
from bridge.ingest.records import ENVELOPE, VALUE, Kept, kept_columns


class RawDecoder:
    def __init__(self, kept: Kept) -> None:
        self.kept = kept

    def seed(self, stored: pa.Schema) -> None:
        """Nothing to learn: the columns of a raw topic never change."""

    def decode(self, records: pa.RecordBatch) -> Decoded:
        if records.num_rows == 0:
            return Decoded()
        if self.kept.key and self.kept.headers and records.schema.equals(ENVELOPE):
            # The envelope is already the row: nothing to build (a consumed raw topic with
            # key and headers kept; produced raw topics skip decoding altogether).
            return Decoded(batches=[records])
        columns = kept_columns(records, self.kept)
        columns[VALUE] = records.column(VALUE)
        return Decoded(batches=[pa.RecordBatch.from_pydict(columns)])
