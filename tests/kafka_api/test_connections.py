"""Connections that go quiet: a client gone without closing its socket (its host lost, a
network cut) must not hold it for good, as Kafka's connections.max.idle.ms sees to; a
connection waiting for its own answer is not idle."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from tests.kafka_api.support import (
    RawClient,
    api_config,
    listening,
    produce_body,
    record_batch,
    stored,
)

PRODUCE = 0


def test_a_quiet_connection_is_closed_and_one_waiting_for_its_answer_is_not(
    tmp_path: Path,
) -> None:
    config = api_config(tmp_path / "store", connections_max_idle="0.5s")
    with listening(config) as (server, bootstrap):
        assert server.sink is not None and server.sink.writer.journal is not None
        journal = server.sink.writer.journal
        flush = journal._flush
        released = threading.Event()

        def held_flush(*args: Any, **kwargs: Any) -> Any:
            released.wait(60)
            return flush(*args, **kwargs)

        journal._flush = held_flush  # type: ignore[method-assign]
        try:
            busy = RawClient(bootstrap)
            quiet = RawClient(bootstrap)
            busy.send_frame(
                busy.request_frame(PRODUCE, 9, produce_body("events", 0, record_batch([b"held"])))
            )
            # The quiet one is closed; by then the busy one has waited as long, for its
            # acks=all answer.
            assert quiet.closed_by_peer()
            released.set()
            answer = busy.response(PRODUCE, 9)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
            busy.close()
            quiet.close()
        finally:
            released.set()
        assert server.stats.closed_connections["idle"] == 1
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"held"]
