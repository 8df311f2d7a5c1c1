"""What in the configuration names a plateau topic of the store, if anything.

A store holds topics the config no longer names: one removed from `topics` after it landed
data, a roll-up no longer declared, the dead letters of a removed produced topic, topics
producers created through the Kafka API. They are kept under `defaults.retention` (and
count toward `storage.max_bytes`); `plateau status` lists them and `plateau drop-topic`
removes their segments.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from bridge.config.models import Config


class Naming(NamedTuple):
    """How the config names a topic: `kind` for scripts, `said` in words."""

    kind: Literal["topic", "rollup", "dlq"]
    said: str


def naming(config: Config, topic: str) -> Naming | None:
    """What names plateau topic `topic` in `config`: a mapping landing in it (consumed, by
    name or a regex `source`, or produced), a declared roll-up, or a produced topic's
    dead-letter topic; None when nothing does."""
    # Roll-ups first: a regex mapping's pattern can match its own roll-up topics' names.
    derived = config.rollup_of(topic)
    if derived is not None:
        base = topic.rpartition(".rollup.")[0]
        return Naming("rollup", f"the {derived[1].granularity} roll-up of topic {base!r}")
    mapping = config.mapping_for_plateau_topic(topic)
    if mapping is not None:
        if mapping.produced:
            return Naming("topic", f"produced topic {mapping.name!r}")
        return Naming("topic", f"the topic of mapping source {mapping.source!r}")
    for produced in config.produced:
        if produced.dlq == topic:
            return Naming("dlq", f"the dead-letter topic of produced topic {produced.name!r}")
    return None
