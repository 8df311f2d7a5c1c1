"""Per partition, whether its next segment is compressed.

Compressing data that does not compress (encrypted payloads, images, producer-compressed
blobs, random text under lz4) costs a seal about as much CPU as the rest of it and saves
nothing. Every compressed write reports what the codec saved (the IPC messages as written
against the same batches' uncompressed IPC size); once a partition's last sample of at least
SAMPLE_BYTES saved less than MIN_SAVING, its next segments are written uncompressed. After
PROBE_BYTES written so, or PROBE_S seconds, its segments are compressed again until a new
sample is complete: data that became compressible is compressed again, and while it does not
compress at most about one part in PROBE_BYTES / SAMPLE_BYTES is compressed for nothing.

Uncompressed, a segment is at most MIN_SAVING larger than compressed (for data like the
sample's): the footprint the choice can cost is bounded by the threshold.

The writer's seals and its consolidation of the same partitions share one AdaptiveCompression,
so all of a partition's writes decide in one place.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import structlog

from plateau_core.policies import Compression, MiB

log = structlog.get_logger(__name__)

# Less saved than this, and compressing is not worth its CPU.
MIN_SAVING = 0.05
# What a decision rests on: several small seals (acks=all group commits) add up to a sample,
# so the few hundred bytes of IPC framing of a tiny seal do not decide alone.
SAMPLE_BYTES = 1 * MiB
# Written uncompressed this much, or for this long, a partition is probed again.
PROBE_BYTES = 32 * MiB
PROBE_S = 60.0

TopicPartition = tuple[str, int]


@dataclass
class _Partition:
    compressing: bool = True
    probing: bool = False
    sample_raw: int = 0  # uncompressed IPC bytes of the compressed writes in the sample
    sample_written: int = 0  # the same writes' bytes as written
    plain_bytes: int = 0  # written uncompressed since the last decision
    plain_since: float = 0.0
    switches: int = 0


@dataclass(frozen=True)
class SegmentCodec:
    """The codec one segment write uses, and where it reports what it wrote."""

    codec: Compression
    report: Callable[[Compression, int, int, tuple[int, int]], None] | None = field(
        default=None, compare=False
    )

    @property
    def measures(self) -> bool:
        """Whether the write should measure its uncompressed size (costs ~1 us a batch)."""
        return self.report is not None and self.codec != "none"

    def wrote(self, raw_bytes: int, written_bytes: int, start_offset: int, end_offset: int) -> None:
        """`raw_bytes`: the batches' IPC size uncompressed (== written when not compressed)."""
        if self.report is not None:
            self.report(self.codec, raw_bytes, written_bytes, (start_offset, end_offset))


class AdaptiveCompression:
    """The codec of each partition's next write: `codec` when it pays, else none.

    Not adaptive (`adaptive=False`, or `codec` "none"), every write uses `codec`.
    Thread-safe: seal threads and the consolidation thread write the same partitions.
    """

    def __init__(
        self,
        codec: Compression,
        *,
        adaptive: bool = True,
        min_saving: float = MIN_SAVING,
        sample_bytes: int = SAMPLE_BYTES,
        probe_bytes: int = PROBE_BYTES,
        probe_s: float = PROBE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.codec: Compression = codec
        self.adaptive = adaptive and codec != "none"
        self.min_saving = min_saving
        self.sample_bytes = sample_bytes
        self.probe_bytes = probe_bytes
        self.probe_s = probe_s
        self._clock = clock
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartition, _Partition] = {}

    def choose(self, topic: str, partition: int) -> SegmentCodec:
        """What the partition's next segment is written with."""
        if not self.adaptive:
            return SegmentCodec(self.codec)
        key = (topic, partition)
        with self._lock:
            state = self._partitions.setdefault(key, _Partition())
            if not state.compressing and not state.probing and self._probe_due(state):
                state.probing = True
            compress = state.compressing or state.probing
        return SegmentCodec(
            self.codec if compress else "none",
            partial(self._wrote, key),
        )

    def modes(self) -> dict[TopicPartition, bool]:
        """Per partition written so far: whether its segments are compressed now."""
        with self._lock:
            return {k: s.compressing for k, s in self._partitions.items()}

    def switches(self) -> dict[TopicPartition, int]:
        """Per partition: how often it switched between compressed and uncompressed."""
        with self._lock:
            return {k: s.switches for k, s in self._partitions.items() if s.switches}

    def _probe_due(self, state: _Partition) -> bool:
        return (
            state.plain_bytes >= self.probe_bytes
            or self._clock() - state.plain_since >= self.probe_s
        )

    def _wrote(
        self,
        key: TopicPartition,
        codec: Compression,
        raw: int,
        written: int,
        offsets: tuple[int, int],
    ) -> None:
        """A write of the partition done: `offsets` its [start, end)."""
        with self._lock:
            state = self._partitions.setdefault(key, _Partition())
            if codec == "none":
                state.plain_bytes += written
                return
            state.sample_raw += raw
            state.sample_written += written
            if state.sample_raw < self.sample_bytes:
                return
            ratio = state.sample_written / state.sample_raw
            sample = state.sample_raw
            state.sample_raw = state.sample_written = 0
            pays = 1.0 - ratio >= self.min_saving
            was_probe = state.probing
            state.probing = False
            if pays == state.compressing:
                if not pays:  # a probe that found nothing: look again after the next interval
                    state.plain_bytes, state.plain_since = 0, self._clock()
                return
            state.compressing = pays
            state.switches += 1
            if not pays:
                state.plain_bytes, state.plain_since = 0, self._clock()
        log.info(
            "compression_resumed" if pays else "compression_paused",
            topic=key[0],
            partition=key[1],
            start_offset=offsets[0],
            end_offset=offsets[1],
            codec=self.codec,
            ratio=round(ratio, 4),
            min_saving=self.min_saving,
            sample_bytes=sample,
            probe=was_probe,
        )
