"""Helpers over consumed messages and the offsets a worker commits."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

import pyarrow as pa
from confluent_kafka import Message, TopicPartition

Key = tuple[str, int]  # (source topic, partition)


def by_partition(messages: Sequence[Message]) -> list[tuple[Key, list[Message]]]:
    """The messages grouped by (topic, partition), each group in the order consumed.

    consume() returns runs of one partition; the run boundaries are found with C-level
    comparisons of neighbours rather than a Python loop over every message.
    """
    if not messages:
        return []
    topics = list(map(Message.topic, messages))
    partitions = list(map(Message.partition, messages))
    if topics.count(topics[0]) == len(topics):  # one topic: compare partitions (no tuples)
        changes = map(operator.ne, partitions, partitions[1:])
    else:
        keys = list(zip(topics, partitions, strict=True))
        changes = map(operator.ne, keys, keys[1:])
    starts = [0, *itertools.compress(range(1, len(messages)), changes)]
    groups: dict[Key, list[Message]] = {}
    for start, end in zip(starts, [*starts[1:], len(messages)], strict=True):
        topic, partition = topics[start], partitions[start]
        if topic is None or partition is None:
            continue
        groups.setdefault((topic, partition), []).extend(messages[start:end])
    return list(groups.items())


def before(batch: pa.RecordBatch, offset: int) -> pa.RecordBatch:
    offsets = batch.column("offset")
    keep = sum(1 for o in offsets.to_pylist() if o < offset)
    return batch.slice(0, keep)


def from_offset(batch: pa.RecordBatch, offset: int) -> pa.RecordBatch:
    """The rows at `offset` and after (offsets ascend within a batch)."""
    return batch.slice(before(batch, offset).num_rows)


def describe(offsets: list[TopicPartition]) -> list[str]:
    return [f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in offsets]
