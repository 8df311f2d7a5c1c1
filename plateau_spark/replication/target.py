"""Where replicas go: a local folder (file://) or S3 and S3-compatible stores (s3://).

Both are reached through pyarrow's filesystems, so the same code writes to AWS, to any
S3-compatible server and to local disk; only durability differs (see `FileTarget.write`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

import structlog
from pyarrow import fs

from plateau_core.errors import InvalidInputError, PlateauError
from plateau_core.names import TEMP_MARKER, fsync_path

# Files being written before they get their names: in the target on S3 (moved into place),
# for Spark's writer in the target of a local one. Spark and most readers skip folders
# starting with "_". Each store stages in a folder of its own in it (Target.for_store): its
# replication lock keeps only its own runs apart, and stores share targets.
STAGING_DIR = "_plateau_staging"
# What versions staging at the root of STAGING_DIR (before each store had a folder there)
# left in it: S3 objects `{uuid hex}-{name}` and, in a local target, Spark's staging folders
# `{uuid hex}/`. Store ids are uuids written with dashes, so no store's folder is named so.
_OLDER_SPARK_STAGING = re.compile(r"[0-9a-f]{32}")

log = structlog.get_logger("plateau.replication")


# A local temp file (a write's before its rename) that was not written to for this long and
# whose writer's pid runs no process here was left by a killed write: readers skip it, and
# only the next run removes it. The age spares a writer of another host sharing the folder.
ABANDONED_TEMP_S = 15 * 60

# Beyond this many days of pending data, list the whole tree once instead of a folder per day.
MAX_DAY_LISTINGS = 62


class TargetError(PlateauError):
    """The replication target cannot be reached or written."""


@dataclass(frozen=True)
class S3Settings:
    """Connection settings for s3:// targets; unset fields fall back to the AWS_* variables."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    def resolved(self, env: Mapping[str, str] | None = None) -> S3Settings:
        source = os.environ if env is None else env
        return S3Settings(
            endpoint_url=self.endpoint_url
            or source.get("AWS_ENDPOINT_URL_S3")
            or source.get("AWS_ENDPOINT_URL"),
            region=self.region or source.get("AWS_REGION") or source.get("AWS_DEFAULT_REGION"),
            access_key_id=self.access_key_id or source.get("AWS_ACCESS_KEY_ID"),
            secret_access_key=self.secret_access_key or source.get("AWS_SECRET_ACCESS_KEY"),
            session_token=self.session_token or source.get("AWS_SESSION_TOKEN"),
        )


@dataclass(frozen=True)
class Target:
    """A parsed target URI; picklable, so Spark tasks carry it to executors."""

    uri: str
    scheme: str  # "file" or "s3"
    root: str  # local absolute path, or bucket/prefix
    s3: S3Settings = S3Settings()
    # Relative folder this target's writes are staged in, and that clear_staging empties.
    staging: str = STAGING_DIR

    @classmethod
    def parse(cls, uri: str, s3: S3Settings | None = None) -> Target:
        parsed = urlparse(uri)
        if parsed.scheme in ("", "file"):
            path = Path(parsed.path if parsed.scheme else uri).expanduser().resolve()
            return cls(uri=uri, scheme="file", root=str(path))
        if parsed.scheme in ("s3", "s3a"):
            if not parsed.netloc:
                raise InvalidInputError(f"target {uri!r} names no bucket (s3://bucket/prefix)")
            root = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
            return cls(uri=uri, scheme="s3", root=root, s3=(s3 or S3Settings()).resolved())
        raise InvalidInputError(
            f"target {uri!r}: the scheme must be file:// or s3:// (got {parsed.scheme}://)"
        )

    def for_store(self, store_id: str) -> Target:
        """This target staging its writes in a folder of the store's own, which the store's
        runs (one at a time, under its replication lock) may empty."""
        return dataclasses.replace(self, staging=f"{STAGING_DIR}/{store_id}")

    def at(self, uri: str) -> Target:
        """Another location (an Iceberg table's) reached with this target's settings and
        staging its writes as this one does."""
        return dataclasses.replace(Target.parse(uri, self.s3), staging=self.staging)

    def filesystem(self) -> fs.FileSystem:
        if self.scheme == "file":
            return fs.LocalFileSystem()
        options: dict[str, Any] = {
            "access_key": self.s3.access_key_id,
            "secret_key": self.s3.secret_access_key,
            "session_token": self.s3.session_token,
            "region": self.s3.region or "us-east-1",
        }
        if self.s3.endpoint_url:
            endpoint = urlparse(self.s3.endpoint_url)
            options["endpoint_override"] = endpoint.netloc or endpoint.path
            options["scheme"] = endpoint.scheme or "https"
        return fs.S3FileSystem(**{k: v for k, v in options.items() if v is not None})

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def write(
        self, filesystem: fs.FileSystem, relative: str, produce: Callable[[IO[bytes]], None]
    ) -> int:
        """Write one file so that it exists under its name only when complete and durable;
        returns its size. Locally: temp file, fsync, rename, fsync the folder. On S3: an
        object under the staging prefix, then moved (a server-side copy) to its name; closing
        an upload completes it whatever was written, so a write that fails half way must not
        be under the final name."""
        final = self.path(relative)
        if self.scheme == "file":
            return _write_local(Path(final), produce)
        temp = self.path(f"{self.staging}/{uuid.uuid4().hex}-{relative.rsplit('/', 1)[-1]}")
        try:
            with filesystem.open_output_stream(temp) as stream:
                produce(stream)
            filesystem.move(temp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                filesystem.delete_file(temp)
            raise
        return int(filesystem.get_file_info(final).size)

    def clear_staging(self, filesystem: fs.FileSystem, *, now: float | None = None) -> None:
        """Delete what a killed run left under this target's S3 staging prefix. Only the
        store's own (for_store): its runs hold its replication lock, so none of them writes
        there now, while another store's run may be writing under its own. Then what older
        versions staged at the staging root (sweep_older_staging)."""
        if self.scheme != "file":
            with contextlib.suppress(FileNotFoundError):
                filesystem.delete_dir_contents(self.path(self.staging), missing_dir_ok=True)
        self.sweep_older_staging(filesystem, now=now)

    def sweep_older_staging(self, filesystem: fs.FileSystem, *, now: float | None = None) -> int:
        """Delete what versions staging at the root of STAGING_DIR left there: the objects
        directly in it, and a local target's Spark staging folders, none of them any store's
        folder. Only those untouched for ABANDONED_TEMP_S: no lock keeps an older version's
        run (of any store) out, and one may still be writing them. Returns how many."""
        selector = fs.FileSelector(self.path(STAGING_DIR), allow_not_found=True)
        try:
            entries = filesystem.get_file_info(selector)
        except OSError as exc:
            raise TargetError(f"cannot list {self.uri}/{STAGING_DIR}: {exc}") from exc
        stale_before = (time.time() if now is None else now) - ABANDONED_TEMP_S
        removed = 0
        for entry in entries:
            if entry.type == fs.FileType.File:
                touched = _mtime(entry)
            elif self.scheme == "file" and _OLDER_SPARK_STAGING.fullmatch(entry.base_name):
                inside = fs.FileSelector(entry.path, recursive=True, allow_not_found=True)
                touched = max(_mtime(i) for i in [entry, *filesystem.get_file_info(inside)])
            else:
                continue  # a store's folder (or nothing plateau stages)
            if touched >= stale_before:
                continue
            if entry.type == fs.FileType.File:
                filesystem.delete_file(entry.path)
            else:
                filesystem.delete_dir(entry.path)
            removed += 1
            log.warning(
                "replica_older_staging_removed",
                path=entry.path.removeprefix(self.root + "/"),
                target=self.uri,
                reason="staged at the staging root by an older version, untouched since",
            )
        return removed

    def list_files(self, filesystem: fs.FileSystem, relative_dir: str) -> list[str]:
        """Names of the files directly in a folder of the target (none if it is missing)."""
        selector = fs.FileSelector(self.path(relative_dir), allow_not_found=True)
        try:
            infos = filesystem.get_file_info(selector)
        except OSError as exc:
            raise TargetError(f"cannot list {self.uri}/{relative_dir}: {exc}") from exc
        return [i.base_name for i in infos if i.type == fs.FileType.File]

    def partition_files(
        self,
        filesystem: fs.FileSystem,
        under: str,
        days: Sequence[date],
        folder: Callable[[date], str],
        partition: int,
    ) -> Iterator[str]:
        """Relative paths of the files one Kafka partition holds in these days' folders
        (`folder(day)`); past MAX_DAY_LISTINGS days, one recursive listing of `under` kept to
        folders named `partition={partition}`, cheaper than a request per day."""
        if len(days) <= MAX_DAY_LISTINGS:
            for day in days:
                relative_dir = folder(day)
                for name in self.list_files(filesystem, relative_dir):
                    yield f"{relative_dir}/{name}"
            return
        selector = fs.FileSelector(self.path(under), recursive=True, allow_not_found=True)
        suffix = f"/partition={partition}"
        for info in filesystem.get_file_info(selector):
            parent = info.path.rpartition("/")[0]
            if info.type == fs.FileType.File and parent.endswith(suffix):
                yield info.path.removeprefix(self.root + "/")

    def temp_file(self, relative: str) -> bool:
        """Whether the file is a local write's temp file (`.tmp-{pid}-{name}`)."""
        return self.scheme == "file" and relative.rsplit("/", 1)[-1].startswith(TEMP_MARKER)

    def abandoned(self, relative: str, *, now: float | None = None) -> bool:
        """Whether the file is a local write's temp file (`.tmp-{pid}-{name}`) that a killed
        writer left: its pid runs nothing here and it is ABANDONED_TEMP_S old."""
        if not self.temp_file(relative):
            return False
        name = relative.rsplit("/", 1)[-1]
        pid = name.removeprefix(TEMP_MARKER).split("-", 1)[0]
        if not pid.isdigit() or _running(int(pid)):
            return False
        try:
            modified = Path(self.path(relative)).stat().st_mtime
        except FileNotFoundError:
            return False
        return (time.time() if now is None else now) - modified >= ABANDONED_TEMP_S

    def delete(self, filesystem: fs.FileSystem, relative: str) -> None:
        filesystem.delete_file(self.path(relative))


def log_temp_removed(event: str, topic: str, relative: str, partition: int | None = None) -> None:
    """Log the removal of a killed write's temp file, with its partition: `partition` when
    the caller knows it, else the one its folder names (`.../partition=3/.tmp-...`; None
    for a file outside a partition's folder)."""
    if partition is None:
        folder = relative.rpartition("/")[0].rpartition("/")[2]
        number = folder.removeprefix("partition=")
        if folder.startswith("partition=") and number.isdigit():
            partition = int(number)
    log.warning(
        event, topic=topic, partition=partition, path=relative, reason="left by a killed write"
    )


def _mtime(info: fs.FileInfo) -> float:
    """When the entry last changed; an S3 prefix has no time, and counts as long ago."""
    return 0.0 if info.mtime is None else info.mtime.timestamp()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def _write_local(final: Path, produce: Callable[[IO[bytes]], None]) -> int:
    final.parent.mkdir(parents=True, exist_ok=True)
    temp = final.with_name(f"{TEMP_MARKER}{os.getpid()}-{final.name}")
    try:
        with temp.open("wb") as handle:
            produce(handle)
            handle.flush()
            os.fsync(handle.fileno())
        temp.replace(final)
    finally:
        temp.unlink(missing_ok=True)
    fsync_path(final.parent)
    return final.stat().st_size
