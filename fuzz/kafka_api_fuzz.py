"""Fuzz target for the Kafka API's parsers: request frames (kio's entities), record batches
(aiokafka's reader) and the journal's files, read back after a crash. Each may only answer
with its own error types (the listener turns the first two into a closed connection or
CORRUPT_MESSAGE; the journal's stop the start with a message); any other exception is a bug.

The test suite runs the same checks with hypothesis (tests/kafka_api/test_fuzz.py). For a
longer, coverage-guided run:

    .venv/bin/pip install atheris
    .venv/bin/python fuzz/kafka_api_fuzz.py -max_total_time=600
"""

from __future__ import annotations

import contextlib
import sys

import crc32c
import pyarrow as pa

import bridge.kafka_api.lazy_records  # noqa: F401 - registers the loader of produced batches
from bridge.kafka_api.batches import (
    CorruptBatchError,
    UnsupportedFormatError,
    read_batch,
    split_batches,
)
from bridge.kafka_api.protocol import ProtocolError, parse_request
from plateau_core.journal_codec import FRAME, MAGIC, JournalCorruptError, last_group, read_file
from plateau_core.lazy import UnknownLazyKindError


def check_frame(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        parse_request(frame)


def check_batches(data: bytes) -> None:
    """A batch read on arrival is read again at its seal: that must never fail."""
    try:
        batches = [read_batch(part) for part in split_batches(data)]
    except (CorruptBatchError, UnsupportedFormatError):
        return
    for batch in batches:
        assert len(batch.records().values) == batch.count


def check_journal(data: bytes) -> None:
    """A journal file's bytes after its header."""
    buffer = pa.py_buffer(MAGIC + data)
    last_group(buffer)  # finding where a journal ends never fails
    with contextlib.suppress(JournalCorruptError, UnknownLazyKindError):
        read_file(buffer, "fuzz.journal")


def check_journal_frame(body: bytes) -> None:
    """Arbitrary bytes in a frame whose checksum matches: what the decoding must survive."""
    check_journal(FRAME.pack(len(body), crc32c.crc32c(body)) + body)


PARSERS = (check_frame, check_batches, check_journal, check_journal_frame)


def one_input(data: bytes) -> None:
    if not data:
        return
    # The first byte picks the parser, so one corpus serves all.
    PARSERS[data[0] % len(PARSERS)](data[1:])


def main() -> None:
    import atheris  # noqa: PLC0415 - only for fuzzing runs, not a dependency

    atheris.instrument_all()  # coverage of the parsers, already imported above
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
