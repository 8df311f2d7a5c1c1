"""The requests waiting on produced partitions are answered exactly when the offsets they
wait for are durable, whatever order they came in, and once for all their partitions."""

from __future__ import annotations

import asyncio

from bridge.config.topics import TopicMapping
from bridge.ingest.decode.raw import RawDecoder
from bridge.ingest.records import Kept
from bridge.kafka_api.partition import ProducedPartition, Ticket


def _partition(number: int = 0, watermark: int = 5) -> ProducedPartition:
    return ProducedPartition("t", number, TopicMapping(name="t"), RawDecoder(Kept()), watermark, {})


def test_waiters_are_answered_when_their_offsets_are_durable() -> None:
    async def main() -> list[list[bool]]:
        loop = asyncio.get_running_loop()
        state = _partition()
        tickets = [Ticket(loop) for _ in range(5)]
        ends = (5, 10, 20, 20, 15)  # 5: at the watermark, nothing to wait for
        for ticket, end in zip(tickets, ends, strict=True):
            # 15 last: a batch sent again is answered with its first offsets, an earlier end.
            state.durable(end, ticket)
            ticket.arm()
        seen = [[t.remaining == 0 for t in tickets]]
        for end in (9, 15, 20):
            state.reached(end)
            seen.append([t.future.done() for t in tickets[1:]])
        return seen

    assert asyncio.run(main()) == [
        [True, False, False, False, False],
        [False, False, False, False],
        [True, False, False, True],
        [True, True, True, True],
    ]


def test_a_request_over_several_partitions_is_answered_once_all_are_durable() -> None:
    async def main() -> list[tuple[bool, bool, bool]]:
        loop = asyncio.get_running_loop()
        first, second = _partition(0), _partition(1)
        ticket = Ticket(loop)
        first.durable(8, ticket)
        second.durable(6, ticket)
        ticket.arm()
        seen = []
        for state, end in ((second, 6), (first, 7), (first, 8)):
            state.reached(end)
            seen.append((ticket.future.done(), first.is_durable(8), second.is_durable(6)))
        return seen

    assert asyncio.run(main()) == [
        (False, False, True),
        (False, False, True),
        (True, True, True),
    ]


def test_a_partition_going_away_lets_its_waiters_go_not_durable() -> None:
    async def main() -> tuple[bool, bool, str]:
        loop = asyncio.get_running_loop()
        state = _partition()
        ticket = Ticket(loop)
        state.durable(9, ticket)
        ticket.arm()
        state.fail_waiters(ConnectionAbortedError("the listener is stopping"))
        return ticket.future.done(), state.is_durable(9), str(state.failure)

    assert asyncio.run(main()) == (True, False, "the listener is stopping")


def test_a_request_is_not_answered_before_its_last_partition_is_handed_out() -> None:
    """The first partition can be durable while the request still waits to hand out the
    next one (the writer is full, a schema is being fetched): the count is back at zero
    for a while, and that is not the answer."""

    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        first, second = _partition(0), _partition(1)
        ticket = Ticket(loop)
        first.durable(6, ticket)
        first.reached(6)
        seen = [ticket.future.done()]
        second.durable(7, ticket)
        ticket.arm()
        seen.append(ticket.future.done())
        second.reached(7)
        seen.append(ticket.future.done())
        return seen

    assert asyncio.run(main()) == [False, False, True]


def test_a_request_stops_waiting_at_its_timeout_and_its_partitions_still_count_off() -> None:
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        state = _partition()
        late, early = Ticket(loop), Ticket(loop)
        state.durable(9, late)
        state.durable(8, early)
        late.arm(0.05)
        early.arm(30.0)
        seen: list[object] = [late.future.done(), early.future.done()]
        state.reached(8)  # the early one's offsets: answered now, its timer let go
        seen.append((late.future.done(), early.future.done(), early._timer.cancelled()))  # type: ignore[union-attr]
        await asyncio.wait_for(late.future, 5)
        seen.append((late.future.done(), state.is_durable(9), late.remaining))
        state.reached(9)  # counted off after the answer went: nothing more happens
        seen.append(late.remaining)
        return seen

    assert asyncio.run(main()) == [False, False, (False, True, True), (True, False, 1), 0]
