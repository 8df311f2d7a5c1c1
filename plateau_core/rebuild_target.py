"""The database a manifest rebuild fills: emptying it first, and the marker in the data
folder that keeps every opener away from it until the rebuild has recorded every file."""

from __future__ import annotations

import os
import time
from pathlib import Path

import structlog
from sqlalchemy.engine import make_url

from plateau_core.errors import PlateauError
from plateau_core.manifest import Manifest
from plateau_core.manifest.migrations import tables_present
from plateau_core.manifest.models import Base
from plateau_core.manifest.urls import shown_url
from plateau_core.names import fsync_path

log = structlog.get_logger(__name__)


class RebuildRefusedError(PlateauError):
    """The manifest cannot be rebuilt now (serve running, a non-empty target database)."""


def write_marker(marker: Path, url: str) -> None:
    """The manifest is incomplete from here until the marker goes (durably so: a power loss
    must not bring back a half-built manifest without it). It names the database filled."""
    with marker.open("w") as handle:
        handle.write("plateau rebuild-manifest is recording the segment files into\n")
        handle.write(f"{_marked(url)}\n")
        handle.flush()
        os.fsync(handle.fileno())
    fsync_path(marker.parent)


def interrupted_into(marker: Path, url: str) -> bool:
    """Whether the marker is that of a rebuild interrupted while filling this database. The
    store may have been pointed at another one since (a manifest restored from a copy): that
    one's tables are not the interrupted rebuild's to drop."""
    try:
        lines = marker.read_text().splitlines()
    except FileNotFoundError:
        return False
    return _marked(url) in lines[1:]


def _marked(url: str) -> str:
    # The database, not the secret: the marker is a plain file in the data folder.
    return shown_url(url)


def clear_manifest(url: str, *, interrupted: bool = False) -> list[str]:
    """Move an SQLite manifest's files aside; for other databases, insist on an empty one,
    or drop what an `interrupted` rebuild (its marker is there) recorded."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        probe = Manifest(url, upgrade=False)
        try:
            # Any table of a manifest, not only its version: migrations create only what is
            # missing, so a table left behind (bloom filters by segment id, producers) would
            # be taken up by the rebuilt manifest.
            present = tables_present(probe.engine)
            if present and interrupted:
                # The marker is written only once the database was found empty: these
                # tables hold the interrupted rebuild's rows and nothing else.
                tables = [Base.metadata.tables[name] for name in present]
                Base.metadata.drop_all(probe.engine, tables=tables)
                log.warning("interrupted_rebuild_dropped", tables=present)
                present = []
        finally:
            probe.close()
        if present:
            raise RebuildRefusedError(
                f"the manifest database {parsed.render_as_string(hide_password=True)} "
                "already holds a manifest; rebuild-manifest only fills an empty database: "
                f"drop plateau's tables ({', '.join(present)}) or point "
                "storage.manifest_url at a new database"
            )
        return []
    if not parsed.database or parsed.database == ":memory:":
        return []
    base = Path(parsed.database)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved: list[str] = []
    for path in (base, Path(f"{base}-wal"), Path(f"{base}-shm")):
        if not path.exists():
            continue
        target = path.with_name(f"{path.name}.broken-{stamp}")
        if target.exists():
            raise RebuildRefusedError(f"{target} already exists; try again in a second")
        path.rename(target)
        moved.append(str(target))
        log.warning("manifest_moved_aside", path=str(path), to=str(target))
    return moved
