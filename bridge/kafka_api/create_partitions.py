"""CreatePartitions: more partitions for a topic created through the API
(`kafka-topics.sh --alter --partitions`, an AdminClient's create_partitions). A topic the
config lists takes its count from the config file, as it takes its other settings."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from bridge.kafka_api.failures import unfinished
from bridge.kafka_api.sink import ProduceSink

MAX_PARTITIONS = 10_000  # as CreateTopics takes


class Grown(NamedTuple):
    """One topic's answer."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None


class CreatePartitionsHandler:
    def __init__(self, sink: ProduceSink) -> None:
        self.sink = sink
        self.topics = sink.topics

    async def create_partitions(self, body: Any, allowed: Callable[[str], bool]) -> dict[str, Any]:
        named = collections.Counter(topic.name for topic in body.topics)
        answers: list[Grown | asyncio.Future[int]] = []
        for topic in body.topics:
            refusal = (
                Grown(ErrorCode.invalid_request, f"topic {topic.name!r} is listed more than once")
                if named[topic.name] > 1
                else self._refusal(topic, allowed)
            )
            if refusal is not None:
                answers.append(refusal)
            elif body.validate_only:
                answers.append(Grown())
            else:
                answers.append(self.sink.creation.grow(topic.name, topic.count))
        growing = [a for a in answers if isinstance(a, asyncio.Future)]
        timeout_s = body.timeout.total_seconds()
        if growing and timeout_s > 0:
            # As CreateTopics: answered by the request's timeout, the growth going on.
            await asyncio.wait(growing, timeout=timeout_s)
        return {
            "results": [
                {"name": topic.name, "error_code": done.error, "error_message": done.message}
                for topic, answer in zip(body.topics, answers, strict=True)
                for done in [answer if isinstance(answer, Grown) else _outcome(topic.name, answer)]
            ]
        }

    def _refusal(self, topic: Any, allowed: Callable[[str], bool]) -> Grown | None:
        """Why the topic does not grow as asked, or None."""
        name, count = topic.name, topic.count
        if not allowed(name):
            return Grown(ErrorCode.topic_authorization_failed, f"not allowed: {name}")
        if name in self.topics.unopened:
            return Grown(ErrorCode.kafka_storage_error, f"topic {name!r} did not open")
        current = self.topics.partitions.get(name)
        if current is None:
            return Grown(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        if self.topics.configured(name):
            return Grown(
                ErrorCode.policy_violation,
                f"topic {name!r} is set in plateau's config file: raise its `partitions` there "
                "(serve takes it at its next start)",
            )
        if topic.assignments is not None:
            return Grown(ErrorCode.invalid_request, "plateau places partitions itself")
        if count <= current:
            # Kafka's words: a partition count never shrinks.
            why = (
                f"topic {name!r} already has {current} partitions"
                if count == current
                else f"topic {name!r} has {current} partitions, more than the {count} asked for; "
                "a partition count never shrinks"
            )
            return Grown(ErrorCode.invalid_partitions, why)
        if count > MAX_PARTITIONS:
            return Grown(ErrorCode.invalid_partitions, f"at most {MAX_PARTITIONS} partitions")
        return None


def _outcome(topic: str, growing: asyncio.Future[int]) -> Grown:
    still = f"topic {topic!r}'s new partitions are still opening; they are listed once open"
    return Grown(*(unfinished(topic, growing, still) or ()))
