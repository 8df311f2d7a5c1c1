"""Bloom filters kept in memory between reads.

A needle query probes every candidate segment's filter; reading them all from the database
each time (about 12 MB for 5,000 segments of two indexed columns) was most of its planning.
A filter never changes once written: it describes the records at its segment's offsets,
and those are immutable. So a filter is cached under its segment's (topic, partition,
start, end) rather than its row id, which a database may hand out again after a delete;
a merged (consolidated) segment has another span and so another entry. "No filter" is
cached too: at worst it means a segment is opened that a filter restored later would have
skipped, never a row dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

from plateau_core.bloom import Bloom
from plateau_core.manifest.records import SegmentRecord

Span = tuple[str, int, int, int, str]  # topic, partition, start, end, column
# Filters of segments ids by id then column, read from the database for the misses.
Fetch = Callable[[Sequence[int], Sequence[str]], dict[int, dict[str, Bloom]]]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_ENTRY_BYTES = 200  # the key, the entry and the Bloom object around the bits


class BloomCache:
    """A least-recently-used map of filters, bounded by their bytes."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Span, Bloom | None] = OrderedDict()
        self._lock = threading.Lock()

    def blooms(
        self, segments: Iterable[SegmentRecord], columns: Iterable[str], fetch: Fetch
    ) -> dict[int, dict[str, Bloom]]:
        """The filters of these columns in these segments, by segment id then column (a
        segment or column without one is absent), fetching only what is not held."""
        names = sorted(set(columns))
        found: dict[int, dict[str, Bloom]] = {}
        missing: list[SegmentRecord] = []
        with self._lock:
            for segment in segments:
                for column in names:
                    key = _key(segment, column)
                    if key not in self._entries:
                        missing.append(segment)
                        break
                    self._entries.move_to_end(key)
                    bloom = self._entries[key]
                    if bloom is not None:
                        found.setdefault(segment.id, {})[column] = bloom
            self.hits += len(found)
            self.misses += len(missing)
        if not missing:
            return found
        fetched = fetch([s.id for s in missing], names)
        with self._lock:
            for segment in missing:
                held = fetched.get(segment.id, {})
                for column in names:
                    bloom = held.get(column)
                    self._put(_key(segment, column), bloom)
                    if bloom is not None:
                        found.setdefault(segment.id, {})[column] = bloom
        return found

    def _put(self, key: Span, bloom: Bloom | None) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= _size(old)
        self._entries[key] = bloom
        self.bytes += _size(bloom)
        while self.bytes > self.max_bytes and self._entries:
            _, dropped = self._entries.popitem(last=False)
            self.bytes -= _size(dropped)


def _key(segment: SegmentRecord, column: str) -> Span:
    return (segment.topic, segment.partition, segment.start_offset, segment.end_offset, column)


def _size(bloom: Bloom | None) -> int:
    return _ENTRY_BYTES + (0 if bloom is None else len(bloom.bits))
