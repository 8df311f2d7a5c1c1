"""A topic's schema as every reader gives it: the schemas its segments were written with,
merged (plateau_core.schema_merge), a segment file that cannot be read so named."""

from __future__ import annotations

import structlog

from plateau_core.manifest import Manifest
from plateau_core.schema_merge import MergedSchema, merged_schema
from plateau_core.stored_names import TwinColumnsError

log = structlog.get_logger(__name__)


def topic_schema(manifest: Manifest, topic: str) -> MergedSchema:
    """Every schema `topic` was written with, merged.

    Raises:
        TwinColumnsError: A readable segment holds a column stored before the `_` suffix
            rule and its suffixed name (`partition` and `partition_`); the error names the
            topic and those segments' files. A schema only retired segments had is left
            out: no row reads by it.
        InvalidInputError: The schemas cannot be merged.
    """
    schemas = manifest.schemas(topic)
    # Each pass leaves out one more schema: bounded by their number.
    for _ in range(len(schemas) + 1):
        try:
            return merged_schema(schemas.values(), topic)
        except TwinColumnsError as exc:
            if exc.fingerprint is None or exc.fingerprint not in schemas:
                raise
            holders = [
                s for s in manifest.segments(topic) if s.schema_fingerprint == exc.fingerprint
            ]
            if holders:
                files = ", ".join(s.located for s in holders)
                noun = "segment" if len(holders) == 1 else "segments"
                raise exc.at(f"topic {topic!r}: {noun} {files}") from None
            log.warning(
                "retired_schema_left_out",
                topic=topic,
                fingerprint=exc.fingerprint,
                columns=[list(pair) for pair in exc.twins],
                reason="no readable segment holds it; its columns clash with their _ names",
            )
            del schemas[exc.fingerprint]
    return merged_schema(schemas.values(), topic)
