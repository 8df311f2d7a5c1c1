"""Bloom filters kept in memory between reads.

A needle query probes every candidate segment's filter; reading them all from the database
each time (about 12 MB for 5,000 segments of two indexed columns) was most of its planning.
A filter never changes once written: it describes the records at its segment's offsets,
and those are immutable. So a filter is cached under its segment's (topic, partition,
start, end) rather than its row id, which a rebuilt manifest numbers from 1 again; a
merged (consolidated) segment has another span and so another entry. "No filter" is
cached too: at worst it means a segment is opened that a filter restored later would have
skipped, never a row dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from plateau_core.bloom import Bloom


class Spanned(Protocol):
    """A segment as far as its filters go (a SegmentRecord or a listing.SegmentSpan)."""

    @property
    def id(self) -> int: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...


Span = tuple[str, int, int, int]  # topic, partition, start, end
# Filters of segments ids by id then column, read from the database for the misses.
Fetch = Callable[[Sequence[int], Sequence[str]], dict[int, dict[str, Bloom]]]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_ENTRY_BYTES = 200  # the key, the entry and the Bloom object around the bits


class BloomCache:
    """A least-recently-used map of each segment's filters by column, bounded by bytes."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Span, dict[str, Bloom | None]] = OrderedDict()
        self._lock = threading.Lock()

    def blooms(
        self, segments: Iterable[Spanned], columns: Iterable[str], fetch: Fetch
    ) -> dict[int, dict[str, Bloom]]:
        """The filters of these columns in these segments, by segment id then column (a
        segment or column without one is absent), fetching only what is not held."""
        names = sorted(set(columns))
        found: dict[int, dict[str, Bloom]] = {}
        missing: list[Spanned] = []
        served = 0
        entries = self._entries
        with self._lock:
            for segment in segments:
                key = (segment.topic, segment.partition, segment.start_offset, segment.end_offset)
                held = entries.get(key)
                if held is None or any(c not in held for c in names):
                    missing.append(segment)
                    continue
                entries.move_to_end(key)
                served += 1
                mine = {c: b for c in names if (b := held[c]) is not None}
                if mine:
                    found[segment.id] = mine
            self.hits += served
            self.misses += len(missing)
        if not missing:
            return found
        fetched = fetch([s.id for s in missing], names)
        with self._lock:
            for segment in missing:
                got = fetched.get(segment.id, {})
                key = (segment.topic, segment.partition, segment.start_offset, segment.end_offset)
                self._put(key, {c: got.get(c) for c in names})
                mine = {c: b for c in names if (b := got.get(c)) is not None}
                if mine:
                    found[segment.id] = mine
        return found

    def _put(self, key: Span, blooms: dict[str, Bloom | None]) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            blooms = {**old, **blooms}
            self.bytes -= _size(old)
        self._entries[key] = blooms
        self.bytes += _size(blooms)
        while self.bytes > self.max_bytes and self._entries:
            _, dropped = self._entries.popitem(last=False)
            self.bytes -= _size(dropped)


def _size(blooms: dict[str, Bloom | None]) -> int:
    return sum(_ENTRY_BYTES + (0 if b is None else len(b.bits)) for b in blooms.values())
