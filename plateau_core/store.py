"""The Store: a data folder of segments plus the manifest that describes them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from plateau_core.errors import InvalidInputError
from plateau_core.listener import WriterListener
from plateau_core.manifest import Manifest, PartitionSpan, SegmentRecord, open_manifest, sqlite_url
from plateau_core.manifest.urls import parsed_url
from plateau_core.names import MANIFEST_FILE, validate_topic
from plateau_core.policies import WriterPolicy

if TYPE_CHECKING:
    from plateau_core.reader import ReadResult
    from plateau_core.writer import Writer

TimeBound = datetime | int | None


class Store:
    """Open with `Store.open(data_dir)`; several processes may open the same store.

    The reader and the writer are loaded when first used, so a command that only looks at
    the manifest (`plateau status`) starts without loading Arrow.
    """

    def __init__(self, data_dir: Path, manifest: Manifest) -> None:
        self.data_dir = data_dir
        self.manifest = manifest

    @classmethod
    def open(cls, location: str | Path | None = None, *, manifest_url: str | None = None) -> Store:
        """Open (creating if needed) the store in `location`.

        `location` is the data folder; the manifest defaults to SQLite at
        `{data_dir}/manifest.db`. Given only a SQLite `manifest_url`, the data folder is
        the one holding that database file. Pending manifest migrations are applied.

        Args:
            location: The data folder (created owner-only if missing).
            manifest_url: A SQLAlchemy URL of the manifest (PostgreSQL needs
                `plateau[postgres]`).

        Returns:
            The open store; close it (or use it as a context manager) when done.

        Raises:
            InvalidInputError: Neither argument was given, a server manifest came without a
                data folder, or (with a data folder) the URL is not a database URL.
            ManifestUnusableError: A rebuild-manifest did not finish, the manifest is
                damaged, or it is missing or new while segment files exist (opening it would
                lose them as orphans).
            PlateauError: The manifest database cannot be reached, needs a driver that is
                not installed, or is of a newer plateau.
        """
        if location is None:
            if manifest_url is None:
                raise InvalidInputError("Store.open needs a data folder or a manifest URL")
            url = parsed_url(manifest_url)
            if url.get_backend_name() != "sqlite" or not url.database:
                raise InvalidInputError(
                    f"with a {url.get_backend_name()} manifest, give the data folder too"
                )
            location = Path(url.database).parent
        data_dir = Path(location).expanduser().resolve()
        # Owner-only: segments hold whatever the producers wrote.
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        url_text = manifest_url or sqlite_url(data_dir / MANIFEST_FILE)
        manifest = open_manifest(data_dir, url_text)
        for path in manifest.database_files():
            if path.is_relative_to(data_dir):
                path.chmod(0o600)
        return cls(data_dir, manifest)

    def close(self) -> None:
        """Close the manifest's database connections."""
        self.manifest.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- what is stored ---------------------------------------------------------------------

    def topics(self) -> list[str]:
        """Every topic with a watermark (written to, or skipped over), sorted."""
        return self.manifest.topics()

    def spans(self, topic: str | None = None) -> list[PartitionSpan]:
        """Each partition's watermark, replicated offset and what its readable segments
        cover, ordered by topic and partition (`topic`: that topic's only).

        Raises:
            InvalidInputError: `topic` is not a valid topic name.
        """
        return self.manifest.spans(None if topic is None else validate_topic(topic))

    def segment_path(self, segment: SegmentRecord) -> Path:
        """Where the file of a manifest row is."""
        return self.data_dir / segment.path

    def footprint_bytes(self) -> int:
        """Bytes of readable segments plus the manifest's own files."""
        segments = sum(size for size, _ in self.manifest.topic_totals().values())
        return segments + self.manifest.database_bytes()

    # --- reading and writing ----------------------------------------------------------------

    def read(
        self,
        topic: str,
        *,
        partitions: list[int] | None = None,
        start_offset: int | None = None,
        end_offset: int | None = None,
        time_start: TimeBound = None,
        time_end: TimeBound = None,
        columns: list[str] | None = None,
        limit: int | None = None,
        order: Literal["asc", "desc"] = "asc",
        where: Mapping[str, object] | None = None,
        order_by: Literal["offset", "timestamp"] = "offset",
    ) -> ReadResult:
        """Rows of `topic` with start_offset <= offset < end_offset and
        time_start <= timestamp < time_end, as RecordBatches of one merged schema.

        `where` keeps rows whose column equals a value (`{"request_id": "r-1"}`) or one of a
        list (`{"service": ["api", "web"]}`); a null equals nothing. Segments whose promoted
        statistics or bloom filters rule every value out are not opened (`ReadResult.pruned`).

        `order_by="timestamp"` returns the rows in timestamp order across segments and
        partitions (`order` says which way); with a `limit` it reads the newest (or oldest)
        segments first and stops once the limit's rows are certain (ORDER BY timestamp DESC
        LIMIT k). The default, "offset", returns each segment's rows in offset order.

        Args:
            topic: The topic to read; one without segments reads as no rows.
            partitions: Partition numbers to read (None: all).
            start_offset: First offset kept (inclusive).
            end_offset: Offset where the rows stop (exclusive).
            time_start: Earliest timestamp kept (inclusive): a datetime (naive is UTC) or
                epoch milliseconds.
            time_end: Timestamp where the rows stop (exclusive), as `time_start`.
            columns: The columns returned (None: all).
            limit: At most this many rows.
            order: "asc" or "desc" (the reverse order).
            where: Equality or IN conditions on the topic's own columns.
            order_by: "offset" or "timestamp", as above.

        Returns:
            A ReadResult over the segments recorded now: iterate it for RecordBatches or
            call `to_table()`; segment files are opened only then, and a segment that
            cannot be read raises SegmentUnavailableError (SegmentCorruptError when its
            bytes changed) instead of being skipped.

        Raises:
            InvalidInputError: An argument is malformed (topic name, offsets, times,
                partitions, columns, limit, order), a `where` condition is (a value not a
                string, bytes or number, an empty list, a column the bounds filter), or
                `columns` names a column the topic never had; the message names it. A
                `where` value its column's type cannot hold is refused once rows are read.
        """
        from plateau_core.read_request import ReadRequest  # noqa: PLC0415
        from plateau_core.reader import ReadResult  # noqa: PLC0415
        from plateau_core.where import build_where  # noqa: PLC0415

        request = ReadRequest.build(
            validate_topic(topic),
            partitions=partitions,
            start_offset=start_offset,
            end_offset=end_offset,
            time_start=time_start,
            time_end=time_end,
            columns=columns,
            limit=limit,
            order=order,
            where=build_where(where),
            order_by=order_by,
        )
        return ReadResult(self, request)

    def writer(
        self,
        policy: WriterPolicy | None = None,
        listener: WriterListener | None = None,
        *,
        journal: bool = False,
    ) -> Writer:
        """A writer of this store. `journal`: appends are journaled before they are sealed
        (data_dir/journal, one writer at a time); replay what an earlier one left with
        `plateau_core.journal_replay.replay` before appending.

        Args:
            policy: Memory budget, threads, compression, fsync (default WriterPolicy()).
            listener: Told of seals, failed seals, freed capacity and watermark moves, on
                writer threads.
            journal: Journal appends before they are sealed, as above.

        Returns:
            A Writer owning no partition yet: `acquire` the partitions it writes, and
            `close` it when done.
        """
        from plateau_core.journal import Journal  # noqa: PLC0415
        from plateau_core.journal_files import JOURNAL_DIR  # noqa: PLC0415
        from plateau_core.journaled_writer import JournaledWriter  # noqa: PLC0415
        from plateau_core.writer import Writer  # noqa: PLC0415

        if not journal:
            return Writer(self, policy, listener)
        fsync = policy.fsync if policy is not None else True
        return JournaledWriter(
            self, Journal(self.data_dir / JOURNAL_DIR, fsync=fsync), policy, listener
        )
