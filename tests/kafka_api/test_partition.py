"""The requests waiting on a produced partition are answered exactly when the offsets they
wait for are durable, whatever order they came in."""

from __future__ import annotations

import asyncio

from bridge.config.topics import TopicMapping
from bridge.ingest.decode.raw import RawDecoder
from bridge.ingest.records import Kept
from bridge.kafka_api.partition import ProducedPartition


def test_waiters_are_answered_when_their_offsets_are_durable() -> None:
    async def main() -> list[list[bool]]:
        loop = asyncio.get_running_loop()
        state = ProducedPartition("t", 0, TopicMapping(name="t"), RawDecoder(Kept()), 5, {})
        already = state.durable(5, loop)  # at the watermark: nothing to wait for
        later = [state.durable(end, loop) for end in (10, 20, 20)]
        # A batch sent again is answered with its first offsets: an earlier end, after.
        again = state.durable(15, loop)
        seen = []
        for end in (9, 15, 20):
            state.reached(end)
            seen.append([f.done() for f in (already, *later, again)])
        return seen

    assert asyncio.run(main()) == [
        [True, False, False, False, False],
        [True, True, False, False, True],
        [True, True, True, True, True],
    ]
