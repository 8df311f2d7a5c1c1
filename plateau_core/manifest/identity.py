"""The store's id beside its segment files: the manifest's copy is the one readers check,
this one is what rebuild-manifest keeps when it builds a new manifest from the files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import structlog

from plateau_core.errors import PlateauError
from plateau_core.manifest.manifest import Manifest
from plateau_core.manifest.migrations import STORE_ID_VERSION
from plateau_core.manifest.urls import shown_url
from plateau_core.names import STORE_ID_FILE, TEMP_MARKER, fsync_path

log = structlog.get_logger(__name__)


def read_store_id_file(data_dir: Path) -> str | None:
    """The id in `data_dir`'s store-id file, or None when there is none."""
    try:
        text = (data_dir / STORE_ID_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def write_store_id_file(data_dir: Path, store_id: str) -> None:
    """Write the file whole or not at all, durably: a rebuild after a power loss must find
    the id, not an empty file."""
    fd, temp = tempfile.mkstemp(dir=data_dir, prefix=f"{STORE_ID_FILE}{TEMP_MARKER}")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{store_id}\n")
            handle.flush()
            os.fsync(handle.fileno())
        Path(temp).replace(data_dir / STORE_ID_FILE)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_path(data_dir)


def settle_store_id(data_dir: Path, manifest: Manifest) -> str:
    """The store's id, written to `data_dir` when the folder lacks it (a new store, or one
    from before ids) or holds a store's the manifest no longer is (a manifest created anew
    is a new store). A manifest from before ids beside a folder that has one takes the
    folder's: it is the copy kept before an upgrade, put back to roll it back, and the
    streams' checkpoints hold that id. Returns it.

    Raises:
        PlateauError: The manifest already had an id and the folder holds another: they are
            two stores' (opening them together would take one's segment files for orphans).
    """
    recorded = manifest.store_id()
    on_disk = read_store_id_file(data_dir)
    if on_disk == recorded:
        return recorded
    if on_disk is not None and manifest.version_at_open >= STORE_ID_VERSION:
        raise PlateauError(
            f"the manifest at {shown_url(manifest.url)} is store {recorded}'s, but {data_dir} "
            f"is store {on_disk}'s (its {STORE_ID_FILE} file): the data folder and the "
            "manifest belong to different stores; point storage.data_dir and "
            "storage.manifest_url at one store's (if they are one store's, delete "
            f"{data_dir / STORE_ID_FILE} and it is written again)"
        )
    if on_disk is not None and 0 < manifest.version_at_open < STORE_ID_VERSION:
        manifest.adopt_store_id(on_disk)
        log.info("store_id_kept", data_dir=str(data_dir), store_id=on_disk, given=recorded)
        return on_disk
    write_store_id_file(data_dir, recorded)
    log.info("store_id_recorded", data_dir=str(data_dir), store_id=recorded, replaced=on_disk)
    return recorded
