"""The data source's options, checked once with errors that name the option."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from plateau_core import Store
from plateau_core.errors import InvalidInputError
from plateau_core.names import MANIFEST_FILE, validate_topic
from plateau_core.policies import MiB

DEFAULT_PARTITION_BYTES = 64 * MiB
_LIMITS = {
    "maxrecordspertrigger": "rows",
    "maxsegmentspertrigger": "files",
    "maxbytespertrigger": "bytes",
}


@dataclass(frozen=True)
class SourceOptions:
    path: str | None
    manifest: str | None
    topic: str
    max_partition_bytes: int
    trace_file: str | None
    starting_offsets: Literal["earliest", "latest"]
    read_limit: tuple[str, int] | None  # ("rows" | "files" | "bytes", n)
    pushdown: bool

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        # Spark hands options with lower-cased keys; accept either spelling.
        lowered = {k.lower(): v for k, v in options.items()}
        path = lowered.get("path")
        manifest = lowered.get("manifest")
        if not path and not manifest:
            raise InvalidInputError(
                'the plateau source needs option("path", <data_dir>) or option("manifest", <url>)'
            )
        if path and not manifest and not (Path(path).expanduser() / MANIFEST_FILE).is_file():
            raise InvalidInputError(f"no plateau store at {path!r}: it has no {MANIFEST_FILE}")
        topic = lowered.get("topic")
        if not topic:
            raise InvalidInputError('the plateau source needs option("topic", <topic>)')
        starting = lowered.get("startingoffsets", "earliest")
        if starting not in ("earliest", "latest"):
            raise InvalidInputError(
                f"option startingOffsets must be 'earliest' or 'latest', got {starting!r}"
            )
        limits = [
            (kind, _positive(lowered, key)) for key, kind in _LIMITS.items() if key in lowered
        ]
        if len(limits) > 1:
            raise InvalidInputError(
                "set at most one of maxRecordsPerTrigger, maxSegmentsPerTrigger, maxBytesPerTrigger"
            )
        pushdown = lowered.get("pushdown", "true").lower()
        if pushdown not in ("true", "false"):
            raise InvalidInputError(f"option pushdown must be true or false, got {pushdown!r}")
        group_bytes = DEFAULT_PARTITION_BYTES
        if "maxpartitionbytes" in lowered:
            group_bytes = _positive(lowered, "maxpartitionbytes")
        return cls(
            path=path,
            manifest=manifest,
            topic=validate_topic(topic),
            max_partition_bytes=group_bytes,
            trace_file=lowered.get("tracefile"),
            starting_offsets="latest" if starting == "latest" else "earliest",
            read_limit=limits[0] if limits else None,
            pushdown=pushdown == "true",
        )

    def open_store(self) -> Store:
        return Store.open(self.path, manifest_url=self.manifest)


def _positive(options: Mapping[str, str], key: str) -> int:
    raw = options[key]
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInputError(f"option {key} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise InvalidInputError(f"option {key} must be a positive integer, got {raw!r}")
    return value
