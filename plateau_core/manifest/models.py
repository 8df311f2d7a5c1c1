"""The manifest's tables as typed SQLAlchemy 2 models.

Times are epoch milliseconds in BIGINT columns: exact, portable between SQLite and
PostgreSQL, and directly comparable with the segments' `timestamp` column.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import BigInteger, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class SegmentState(StrEnum):
    """A segment's life; it only moves forward: sealed → replicated → deleting → row removed.

    `quarantined` is a side exit: the file disagrees with its row (missing, truncated,
    unreadable), so the segment is excluded from reads until an operator repairs it.
    """

    SEALED = "sealed"
    REPLICATED = "replicated"
    DELETING = "deleting"
    QUARANTINED = "quarantined"


READABLE_STATES = (SegmentState.SEALED, SegmentState.REPLICATED)

# Characters of a column name the statistics and bloom filter tables hold (PostgreSQL enforces
# it; a JSON field name may be longer).
MAX_COLUMN_NAME = 255


class Base(DeclarativeBase):
    pass


class SchemaVersion(Base):
    __tablename__ = "schema_version"

    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    description: Mapped[str] = mapped_column(String(200))
    applied_at: Mapped[int] = mapped_column(BigInteger)


class PartitionRow(Base):
    __tablename__ = "partitions"

    topic: Mapped[str] = mapped_column(String(249), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The watermark: end (exclusive) of the last sealed segment. Never goes backwards.
    next_offset: Mapped[int] = mapped_column(BigInteger)
    replicated_offset: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[int] = mapped_column(BigInteger)


class SegmentRow(Base):
    __tablename__ = "segments"
    __table_args__ = (
        UniqueConstraint("topic", "partition", "start_offset", name="uq_segment_start"),
        Index("ix_segments_span", "topic", "partition", "end_offset"),
        Index("ix_segments_time", "topic", "time_max"),
        Index("ix_segments_state", "state"),
        # A replication run, a consolidation or verify acts on ids it listed earlier: an id
        # SQLite handed out again after its row was removed would name another segment.
        # PostgreSQL's sequence never hands one out twice.
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    topic: Mapped[str] = mapped_column(String(249))
    partition: Mapped[int] = mapped_column(Integer)
    start_offset: Mapped[int] = mapped_column(BigInteger)
    end_offset: Mapped[int] = mapped_column(BigInteger)
    record_count: Mapped[int] = mapped_column(BigInteger)
    time_min: Mapped[int] = mapped_column(BigInteger)
    time_max: Mapped[int] = mapped_column(BigInteger)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    path: Mapped[str] = mapped_column(String(400))
    schema_fingerprint: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[int] = mapped_column(BigInteger)
    replicated_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    deleting_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    problem: Mapped[str | None] = mapped_column(Text, nullable=True)
    # CRC32s of the file's regions as compact JSON (plateau_core.checksums); NULL for
    # segments recorded before schema version 3.
    checksums: Mapped[str | None] = mapped_column(Text, nullable=True)


class SegmentColumnRow(Base):
    """Promoted statistics of one column of one segment (plateau_core.column_stats), written
    in the transaction that records the segment and removed with its row."""

    __tablename__ = "segment_columns"

    segment_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    column_name: Mapped[str] = mapped_column(String(MAX_COLUMN_NAME), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    null_count: Mapped[int] = mapped_column(BigInteger)
    # Encoded as text of their kind; NULL: unknown (an all-null column, a long string's max).
    min_value: Mapped[str | None] = mapped_column(Text, nullable=True)
    max_value: Mapped[str | None] = mapped_column(Text, nullable=True)


class SegmentBloomRow(Base):
    """A bloom filter of one column of one segment (plateau_core.bloom), a copy of the one in
    the file's footer, so planning a query reads it without opening the file."""

    __tablename__ = "segment_blooms"

    segment_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    column_name: Mapped[str] = mapped_column(String(MAX_COLUMN_NAME), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # how values become bytes: int, bytes
    hash_count: Mapped[int] = mapped_column(Integer)
    bits: Mapped[bytes] = mapped_column(LargeBinary)


class SchemaRow(Base):
    """Each distinct segment schema once, so readers can merge schemas without opening files."""

    __tablename__ = "schemas"

    topic: Mapped[str] = mapped_column(String(249), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(32), primary_key=True)
    arrow_schema: Mapped[bytes] = mapped_column(LargeBinary)
    first_seen: Mapped[int] = mapped_column(BigInteger)


class GapRow(Base):
    """Offsets that were never ingested because Kafka no longer had them (its retention
    removed them while plateau was behind)."""

    __tablename__ = "gaps"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    topic: Mapped[str] = mapped_column(String(249))
    partition: Mapped[int] = mapped_column(Integer)
    from_offset: Mapped[int] = mapped_column(BigInteger)
    to_offset: Mapped[int] = mapped_column(BigInteger)  # exclusive
    detected_at: Mapped[int] = mapped_column(BigInteger)


class SourceTopicRow(Base):
    """The Kafka topic a consumed partition comes from, and that topic's id (KIP-516) when
    it was last assigned: a topic deleted and created again has a new id, though its
    offsets may look like the old topic's."""

    __tablename__ = "source_topics"

    topic: Mapped[str] = mapped_column(String(249), primary_key=True)  # the plateau topic
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(249))
    topic_id: Mapped[str] = mapped_column(String(32))
    recorded_at: Mapped[int] = mapped_column(BigInteger)


class StoreIdentityRow(Base):
    """The store's id, one row: random, given when the store is created and kept by
    rebuild-manifest (from the copy in the data folder, names.STORE_ID_FILE). A stream's
    checkpoint holds it, so offsets of another store, or of this folder before it was
    created again, are refused instead of read as this store's."""

    __tablename__ = "store_identity"

    store_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[int] = mapped_column(BigInteger)


class ProducedTopicRow(Base):
    """A topic producers write to plateau's Kafka API, and its partition count (which only
    grows). Topics from the configuration are recorded here too, so the count a producer saw
    survives a configuration that lowers it."""

    __tablename__ = "produced_topics"

    topic: Mapped[str] = mapped_column(String(249), primary_key=True)
    partitions: Mapped[int] = mapped_column(Integer)
    created_by: Mapped[str] = mapped_column(String(16))  # config, create_topics, auto_create
    created_at: Mapped[int] = mapped_column(BigInteger)


class ProducerRow(Base):
    """An idempotent producer's epoch and last batches on one partition, as of the last
    sealed segment (plateau_core.producers). Written in the segment's transaction."""

    __tablename__ = "producers"

    topic: Mapped[str] = mapped_column(String(249), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    producer_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer)
    # JSON [[first_sequence, last_sequence, base_offset], ...], oldest first.
    batches: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[int] = mapped_column(BigInteger)


class CounterRow(Base):
    """Named counters that only grow, like the next producer id to hand out."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)
