"""Topic names and the on-disk layout they turn into."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from plateau_core.errors import InvalidInputError

MAX_TOPIC_LENGTH = 249
_TOPIC_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
SEGMENT_SUFFIX = ".arrow"
MANIFEST_FILE = "manifest.db"
# Present in data_dir while rebuild-manifest records the files: the manifest is incomplete.
REBUILD_MARKER = "manifest.rebuilding"
TEMP_MARKER = ".tmp-"
# The store's id, a copy of the manifest's: rebuild-manifest takes it from here.
STORE_ID_FILE = "store-id"


def fold_case(name: str) -> str:
    """`name` compared ignoring case as Java's `String.equalsIgnoreCase` compares it (Spark's
    resolver): one character at a time, upper-cased then lower-cased, never growing."""
    folded = []
    for char in name:
        upper = char.upper()
        if len(upper) != 1:
            upper = char
        lower = upper.lower()
        if len(lower) != 1:
            lower = "i" if upper == "\u0130" else upper
        folded.append(lower)
    return "".join(folded)


def validate_topic(name: object) -> str:
    """Return `name` if it is a usable topic name; topic names become directory names."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"topic name must be a non-empty string, got {name!r}")
    if len(name) > MAX_TOPIC_LENGTH:
        raise InvalidInputError(
            f"topic name is {len(name)} characters long; at most {MAX_TOPIC_LENGTH} are allowed"
        )
    if name in {".", ".."}:
        raise InvalidInputError(f"topic name {name!r} is reserved")
    if not _TOPIC_PATTERN.fullmatch(name):
        raise InvalidInputError(f"topic name {name!r} may only hold the characters [A-Za-z0-9._-]")
    return name


def validate_partition(partition: object) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidInputError(f"partition must be a non-negative integer, got {partition!r}")
    return partition


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / "topics" / validate_topic(topic) / str(validate_partition(partition))


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path, *, fsync: bool = True, mode: int = 0o777) -> None:
    """Create `directory` and its missing parents, each synced into its parent: syncing a
    folder keeps the names in it, not its own name, and a crash must not take away a folder
    holding files the manifest records."""
    missing: list[Path] = []
    path = directory
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir(mode=mode, exist_ok=True)
        if fsync:
            fsync_path(folder.parent)


def segment_name(start_offset: int) -> str:
    return f"{start_offset:020d}{SEGMENT_SUFFIX}"


def consolidated_name(start_offset: int, end_offset: int) -> str:
    """A consolidated segment's name: its span, so it never takes the name of the first
    segment it replaces (readers in flight may still open that file)."""
    return f"{start_offset:020d}-{end_offset:020d}{SEGMENT_SUFFIX}"


def segment_start(name: str) -> int | None:
    """The start offset a segment file name encodes (sealed or consolidated), or None for any
    other file."""
    span = segment_span(name)
    return None if span is None else span[0]


def segment_span(name: str) -> tuple[int, int | None] | None:
    """(start, end) a segment file name encodes; end is None for a sealed segment's name (only
    a consolidated one names its end). None for any other file."""
    stem = name.removesuffix(SEGMENT_SUFFIX)
    start, dash, end = stem.partition("-")
    if stem == name or len(start) != 20 or not start.isdigit():
        return None
    if not dash:
        return int(start), None
    if len(end) != 20 or not end.isdigit():
        return None
    return int(start), int(end)


def relative_segment_path(topic: str, partition: int, start_offset: int) -> str:
    """The path stored in the manifest: relative to data_dir, '/'-separated."""
    return f"topics/{validate_topic(topic)}/{partition}/{segment_name(start_offset)}"


def segment_files(data_dir: Path) -> Iterator[Path]:
    """Every file named like a segment under data_dir/topics/{topic}/{partition}/."""
    for path in (data_dir / "topics").glob(f"*/*/*{SEGMENT_SUFFIX}"):
        if segment_start(path.name) is not None:
            yield path


def has_segment_files(data_dir: Path) -> bool:
    return next(segment_files(data_dir), None) is not None
