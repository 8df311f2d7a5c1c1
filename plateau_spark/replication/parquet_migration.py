"""A Parquet replica's files kept of one type per column when the store widens a column.

Each run writes a column in the type the store reads it as then, so a column that widened
since an earlier run (bigint, then double) would be of both types across the topic's files,
which Spark does not read as one table. The replica records the types its files hold in
`{topic}/_plateau_schema` (readers skip names starting with `_`); a run that finds the
store's type wider than the recorded one rewrites, before writing its own files, each file
of the topic holding the narrower type, under the same name and written like every replica
file (complete under its name or not there), then records the new type.

Order, and why a kill at any point leaves what the next run completes:
1. The record is written with the new types and `complete: false`.
2. Each file of the topic whose footer holds a type the new one widens is rewritten.
3. The record is written `complete: true`.
A run finding the record incomplete (or none: a replica written before records were kept)
goes through every file again: files already rewritten hold the new type and are skipped.
Rows are neither added nor removed: each file keeps its name, its rows and their order.

A rewrite killed half way leaves a local temp file next to the file, in a folder the run's
own sweep of pending folders may never look in again: the migration's listing removes those
a killed write left (Target.abandoned), and names the younger ones in the record, which
later runs look at until they are gone. On S3 the rewrite is staged in the store's staging
folder, which its next run empties.

Several stores may replicate one consumed topic into one target. A store whose own type is
narrower than the record (another store widened it) writes its files, then reads the record
again and rewrites those of its files that hold a narrower type: a store migrating writes
the record before listing the files, so a file written meanwhile is either in its listing
or rewritten by the store that wrote it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq
import structlog
from pyarrow import fs

from plateau_spark.replication.files import ReplicaFile, parse_replica_name
from plateau_spark.replication.target import Target, TargetError, log_temp_removed
from plateau_spark.replication.widening import (
    casts_for,
    described,
    rewrite_parquet,
    same_type,
    widens,
)

log = structlog.get_logger("plateau.replication")

SCHEMA_FILE = "_plateau_schema"
_PARTITION_DIR = "partition="

Step = Callable[[str], None]


@dataclass(frozen=True)
class Recorded:
    """The column types a topic's replica files hold (all of them once `complete`), and the
    local temp files a migration's listing found that were not abandoned yet (TEMP_FILES)."""

    schema: pa.Schema
    complete: bool
    temp_files: tuple[str, ...] = ()


def schema_path(topic: str) -> str:
    return f"{topic}/{SCHEMA_FILE}"


def read_record(target: Target, filesystem: fs.FileSystem, topic: str) -> Recorded | None:
    try:
        with filesystem.open_input_stream(target.path(schema_path(topic))) as stream:
            text = bytes(stream.read()).decode()
    except FileNotFoundError:
        return None
    except OSError as exc:  # pyarrow's S3 errors are OSErrors
        raise TargetError(f"cannot read {target.uri}/{schema_path(topic)}: {exc}") from exc
    try:
        document = json.loads(text)
        arrow = base64.b64decode(document["arrow_schema"])
        schema = pa.ipc.read_schema(pa.py_buffer(arrow))
    except (ValueError, KeyError, TypeError, pa.ArrowInvalid) as exc:
        raise TargetError(
            f"{target.uri}/{schema_path(topic)} is not a schema record plateau wrote ({exc}); "
            "remove it and the next run records the replica's types again from its files"
        ) from exc
    temp_files = document.get("temp_files", [])
    if not isinstance(temp_files, list) or not all(isinstance(p, str) for p in temp_files):
        temp_files = []  # only a hint: the next migration's listing finds them again
    return Recorded(schema, bool(document.get("complete")), tuple(temp_files))


def write_record(
    target: Target,
    filesystem: fs.FileSystem,
    topic: str,
    schema: pa.Schema,
    *,
    complete: bool,
    temp_files: Sequence[str] = (),
) -> None:
    bare = schema.remove_metadata()
    document: dict[str, object] = {
        "complete": complete,
        # For whoever looks: the types as Arrow names them. The Arrow schema is what is read.
        "columns": {f.name: str(f.type) for f in bare},
        "arrow_schema": base64.b64encode(bare.serialize().to_pybytes()).decode(),
    }
    if temp_files:
        document["temp_files"] = list(temp_files)

    def produce(out: IO[bytes]) -> None:
        out.write(json.dumps(document, indent=1).encode())

    try:
        target.write(filesystem, schema_path(topic), produce)
    except OSError as exc:
        raise TargetError(f"cannot write {target.uri}/{schema_path(topic)}: {exc}") from exc


@dataclass(frozen=True)
class Reconciled:
    goal: pa.Schema  # the types every file of the replica is to hold
    widened: list[str]  # columns whose recorded type the store widened: files to rewrite
    unmigrated: dict[str, tuple[pa.DataType, pa.DataType]]  # name -> (replica's, store's)


def reconcile(recorded: pa.Schema, wanted: pa.Schema, topic: str) -> Reconciled:
    """The recorded types of `topic`'s replica, widened where the store's (`wanted`) widen
    them, with the columns the store added. A recorded type wider than the store's stays
    (another store widened it); a change that is no widening is left as it is, and
    reported."""
    fields = {f.name: f for f in recorded}
    widened: list[str] = []
    unmigrated: dict[str, tuple[pa.DataType, pa.DataType]] = {}
    for field in wanted:
        have = fields.get(field.name)
        if have is None:
            fields[field.name] = field
        elif same_type(have.type, field.type) or widens(field.type, have.type, topic, field.name):
            continue
        elif widens(have.type, field.type, topic, field.name):
            fields[field.name] = field
            widened.append(field.name)
        else:
            unmigrated[field.name] = (have.type, field.type)
    return Reconciled(pa.schema(list(fields.values())), widened, unmigrated)


class ReplicaTypes:
    """One run's migrations of the topics it writes to (it holds the replication lock)."""

    def __init__(
        self, target: Target, filesystem: fs.FileSystem, compression: str, step: Step
    ) -> None:
        self.target = target
        self.filesystem = filesystem
        self.compression = compression
        self._step = step

    def prepare(self, topic: str, wanted: pa.Schema, young_temps: Sequence[str] = ()) -> int:
        """Before the run writes the topic's files (of the `wanted` types): migrate the
        replica's files when the store widened a column, or when an earlier migration did
        not finish. The temp files the record names, and `young_temps` (found by the run's
        sweep of pending folders, too young to tell), go once a killed write left them; the
        others are named in the record. Returns how many files were rewritten."""
        recorded = read_record(self.target, self.filesystem, topic)
        known = () if recorded is None else recorded.temp_files
        waiting = tuple(sorted({*known, *young_temps}))
        if recorded is None:
            # A replica written before types were recorded (or none yet): its files are
            # looked at once.
            goal, widened = wanted, []
        else:
            found = reconcile(recorded.schema, wanted, topic)
            goal, widened = found.goal, found.widened
            for name, (held, store) in found.unmigrated.items():
                log.warning(
                    "replica_type_not_migrated",
                    topic=topic,
                    column=name,
                    replica_type=str(held),
                    store_type=str(store),
                    target=self.target.uri,
                    reason="no widening the store's readers do: the files keep their types",
                )
            if recorded.complete and not widened:
                left = self._sweep(topic, waiting)
                # Columns added (no file to rewrite), or temp files gone or found.
                if not goal.equals(recorded.schema) or left != known:
                    write_record(
                        self.target, self.filesystem, topic, goal, complete=True, temp_files=left
                    )
                return 0
        # Recorded first: a store writing files of the topic meanwhile reads it after its
        # write and rewrites its own files (conform_written).
        write_record(self.target, self.filesystem, topic, goal, complete=False, temp_files=waiting)
        files, temps = self._listing(topic)
        rewritten = self.conform(topic, files, goal)
        left = self._sweep(topic, sorted({*waiting, *temps}))
        write_record(self.target, self.filesystem, topic, goal, complete=True, temp_files=left)
        if rewritten or widened:
            log.info(
                "replica_types_migrated",
                topic=topic,
                columns={name: str(goal.field(name).type) for name in widened},
                files=rewritten,
                target=self.target.uri,
            )
        return rewritten

    def conform_written(self, topic: str, wanted: pa.Schema, files: Sequence[ReplicaFile]) -> int:
        """After the run wrote `files` in the `wanted` types: rewrite those holding a type
        the record widens (another store widened the column). Returns how many."""
        recorded = read_record(self.target, self.filesystem, topic)
        if recorded is None:
            return 0
        held = recorded.schema
        narrower = [
            f.name
            for f in wanted
            if f.name in held.names and widens(f.type, held.field(f.name).type, topic, f.name)
        ]
        if not narrower:
            return 0
        return self.conform(topic, [f.path for f in files], recorded.schema)

    def conform(self, topic: str, paths: Sequence[str] | Iterator[str], goal: pa.Schema) -> int:
        rewritten = 0
        for relative in paths:
            try:
                changed = self._conform_file(topic, relative, goal)
            except OSError as exc:
                raise TargetError(
                    f"topic {topic!r}: cannot migrate {self.target.uri}/{relative} to the "
                    f"store's wider types: {exc}; the next run does it again"
                ) from exc
            if changed:
                rewritten += 1
                self._step("migration_file_rewritten")
        return rewritten

    def _listing(self, topic: str) -> tuple[list[str], list[str]]:
        """Relative paths of every replica file of the topic (`.../partition=P/{first}-
        {last}.parquet`), and of the local temp files in its folders (a killed rewrite's,
        in folders no pending segment's rows go to, which no other listing looks in)."""
        selector = fs.FileSelector(self.target.path(topic), recursive=True, allow_not_found=True)
        try:
            infos = self.filesystem.get_file_info(selector)
        except OSError as exc:
            raise TargetError(f"cannot list {self.target.uri}/{topic}: {exc}") from exc
        files, temps = [], []
        for info in sorted(infos, key=lambda i: i.path):
            if info.type != fs.FileType.File:
                continue
            relative = info.path.removeprefix(self.target.root + "/")
            parent = info.path.rpartition("/")[0].rpartition("/")[2]
            if self.target.temp_file(relative):
                temps.append(relative)
            elif parent.startswith(_PARTITION_DIR) and parse_replica_name(info.base_name):
                files.append(relative)
        return files, temps

    def _sweep(self, topic: str, temps: Sequence[str]) -> tuple[str, ...]:
        """Delete the temp files a killed write left (Target.abandoned); the others still
        there, which a later run looks at again: a run soon after the kill finds them too
        young, and the migration it completes lists the topic's folders for the last time."""
        left = []
        for relative in temps:
            if self.target.abandoned(relative):
                self.target.delete(self.filesystem, relative)
                log_temp_removed("replica_temp_file_removed", topic, relative)
            elif self.filesystem.get_file_info(self.target.path(relative)).type == fs.FileType.File:
                left.append(relative)
        return tuple(left)

    def _conform_file(self, topic: str, relative: str, goal: pa.Schema) -> bool:
        """Rewrite one file when `goal` widens some of its columns; whether it did."""
        with self.filesystem.open_input_file(self.target.path(relative)) as handle:
            source = pq.ParquetFile(handle)
            held = source.schema_arrow
            casts = casts_for(held, goal, topic)
            if not casts:
                return False
            fields = {name: held.field(name).with_type(dtype) for name, dtype in casts.items()}
            self.target.write(
                self.filesystem,
                relative,
                lambda out: rewrite_parquet(source, out, fields, self.compression),
            )
        folder, _, name = relative.rpartition("/")
        first, last = parse_replica_name(name) or (None, None)
        log.info(
            "replica_file_migrated",
            topic=topic,
            partition=int(folder.rpartition(_PARTITION_DIR)[2]),
            first_offset=first,
            last_offset=last,
            rows=source.metadata.num_rows,
            columns=described(held, casts),
            path=relative,
        )
        return True
