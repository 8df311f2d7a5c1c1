"""What `plateau rebuild-manifest` recorded, skipped and moved, and what it cannot rebuild."""

from __future__ import annotations

from dataclasses import dataclass, field

from plateau_core.manifest.urls import shown_url

NOTES = (
    "replication state is not in the segment files: every segment is recorded as sealed and "
    "replicated_offset starts at 0, so the next `plateau replicate` copies everything again "
    "(its Parquet files are rewritten under the same names)",
    "recorded gaps (offsets Kafka had deleted before plateau read them) are not in the files "
    "and are no longer listed",
    "source topic ids are not in the files: each partition records its Kafka topic's id "
    "when next assigned, so a source topic deleted and created again before then is not "
    "said",
    "each watermark is the end of the partition's last readable segment: records after it "
    "that were skipped or sent to the dead-letter topic are read from Kafka again and "
    "handled again by their mapping's on_error",
    "idempotent producers' last batches are not in the files: a producer's retry of a batch "
    "acknowledged before the rebuild is stored again; producer ids start above any handed "
    "out before (from the clock), so none is given twice",
    "topics created through the Kafka API (CreateTopics, auto_create_topics) are not listed "
    "as produced topics: their records are read as before, and producers need the topic "
    "created again (or in the config) to write more",
)


@dataclass(frozen=True)
class RebuiltPartition:
    """What was recorded of one partition, and its watermark now."""

    topic: str
    partition: int
    segments: int
    records: int
    bytes: int
    watermark: int | None


@dataclass(frozen=True)
class SkippedFile:
    """A segment file not recorded as readable, and why."""

    topic: str
    partition: int
    path: str  # relative to data_dir, where it is now
    start_offset: int
    problem: str


@dataclass
class RebuildReport:
    """What `rebuild_manifest` recorded, skipped and moved, and what it could not rebuild."""

    data_dir: str
    manifest_url: str
    store_id: str = ""
    moved_aside: list[str] = field(default_factory=list)
    partitions: list[RebuiltPartition] = field(default_factory=list)
    quarantined: list[SkippedFile] = field(default_factory=list)
    retired: list[SkippedFile] = field(default_factory=list)
    set_aside: list[SkippedFile] = field(default_factory=list)
    temp_removed: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=lambda: list(NOTES))

    @property
    def segments(self) -> int:
        """Segments recorded as readable."""
        return sum(p.segments for p in self.partitions)

    def lines(self) -> list[str]:
        """The report for people."""
        # Printed for a person: the URL's password stays out of it.
        shown = shown_url(self.manifest_url)
        out = [f"rebuilt the manifest of {self.data_dir} ({shown}), store {self.store_id}"]
        out += [f"  moved aside: {path}" for path in self.moved_aside]
        for p in self.partitions:
            out.append(
                f"  {p.topic}[{p.partition}]: {p.segments} segments, {p.records:,} records, "
                f"{p.bytes:,} bytes, watermark {p.watermark}"
            )
        for skipped in self.quarantined:
            out.append(f"  QUARANTINED {skipped.path}: {skipped.problem}")
        for skipped in self.retired:
            out.append(f"  retired {skipped.path}: {skipped.problem}")
        for skipped in self.set_aside:
            out.append(
                f"  SET ASIDE {skipped.path}: {skipped.problem}; its records from offset "
                f"{skipped.start_offset} are read from Kafka again"
            )
        out += [f"  removed temp file {path}" for path in self.temp_removed]
        out += [f"  ignored {path}: not a topic/partition folder" for path in self.ignored]
        out.append(f"{self.segments} segments recorded. Not rebuilt:")
        out += [f"  - {note}" for note in self.notes]
        return out
