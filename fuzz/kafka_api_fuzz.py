"""Fuzz target for the Kafka API's parsers: request frames (kio's entities) and record
batches (aiokafka's reader). Each may only answer with its own error types, which the
listener turns into a closed connection or CORRUPT_MESSAGE; any other exception is a bug.

The test suite runs the same checks with hypothesis (tests/kafka_api/test_fuzz.py). For a
longer, coverage-guided run:

    .venv/bin/pip install atheris
    .venv/bin/python fuzz/kafka_api_fuzz.py -max_total_time=600
"""

from __future__ import annotations

import contextlib
import sys

from bridge.kafka_api.batches import (
    CorruptBatchError,
    UnsupportedFormatError,
    read_batch,
    split_batches,
)
from bridge.kafka_api.protocol import ProtocolError, parse_request


def check_frame(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        parse_request(frame)


def check_batches(data: bytes) -> None:
    try:
        for part in split_batches(data):
            read_batch(part)
    except (CorruptBatchError, UnsupportedFormatError):
        pass


def one_input(data: bytes) -> None:
    if not data:
        return
    # The first byte picks the parser, so one corpus serves both.
    (check_frame if data[0] % 2 else check_batches)(data[1:])


def main() -> None:
    import atheris  # noqa: PLC0415 - only for fuzzing runs, not a dependency

    atheris.instrument_all()  # coverage of the parsers, already imported above
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
