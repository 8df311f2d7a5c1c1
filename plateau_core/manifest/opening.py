"""Opening a manifest safely: a lost or damaged one is refused while segment files exist."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy.engine import URL
from sqlalchemy.exc import DatabaseError, DBAPIError

from plateau_core.errors import ManifestUnusableError, PlateauError
from plateau_core.manifest.identity import settle_store_id
from plateau_core.manifest.manifest import Manifest
from plateau_core.manifest.urls import parsed_url
from plateau_core.names import REBUILD_MARKER, has_segment_files


def open_manifest(data_dir: Path, url: str) -> Manifest:
    """Open and migrate the manifest, refusing a lost or damaged one while segments exist.

    Without this, a new empty manifest beside existing segment files would make recovery
    delete every one of them as an orphan. The check runs before migrating, so a refused
    open leaves no manifest behind that a second open would take for a real one. A manifest
    that rebuild-manifest did not finish is refused for the same reason: it lacks the files
    the rebuild had not reached. The store's id is written beside the segment files when
    they lack it (names.STORE_ID_FILE).

    Raises:
        InvalidInputError: `url` is not a database URL.
        ManifestUnusableError: A rebuild-manifest did not finish, the manifest is damaged,
            or it is missing or new while `data_dir` holds segment files.
        PlateauError: The database cannot be reached or opened, needs a driver that is not
            installed, or is of a newer plateau; or it is another store's than `data_dir`.
    """
    if (data_dir / REBUILD_MARKER).exists():
        raise ManifestUnusableError(
            data_dir,
            "is incomplete: a plateau rebuild-manifest was interrupted (or is still running)",
        )
    parsed = parsed_url(url)
    database = parsed.database
    if (
        parsed.get_backend_name() == "sqlite"
        and database
        and database != ":memory:"
        and not Path(database).exists()
        and has_segment_files(data_dir)
    ):
        raise ManifestUnusableError(data_dir, f"({database}) is missing")
    try:
        manifest = Manifest(url, upgrade=False)
        try:
            if manifest.version_at_open == 0 and has_segment_files(data_dir):
                raise ManifestUnusableError(data_dir, "is empty (new) but segment files exist")
            manifest.upgrade()
            settle_store_id(data_dir, manifest)
        except BaseException:
            manifest.close()
            raise
    except DatabaseError as exc:
        if is_corruption(exc.orig):
            raise ManifestUnusableError(data_dir, f"is damaged ({exc.orig})") from exc
        raise _unreachable(parsed, exc) from exc
    except DBAPIError as exc:
        raise _unreachable(parsed, exc) from exc
    except sqlite3.DatabaseError as exc:
        if not is_corruption(exc):
            raise
        raise ManifestUnusableError(data_dir, f"is damaged ({exc})") from exc
    return manifest


def _unreachable(url: URL, exc: DBAPIError) -> PlateauError:
    """The database could not be opened (a server down, a folder missing, a lock held past
    the busy timeout): one line naming the manifest, without its password."""
    reason = " ".join(str(exc.orig).split())
    where = url.render_as_string(hide_password=True)
    return PlateauError(f"cannot open the manifest at {where}: {reason}")


def is_corruption(error: BaseException | None) -> bool:
    """SQLite's "not a database" and "malformed" errors, as opposed to locks or permissions
    (which are OperationalErrors and mean the file is fine)."""
    if not isinstance(error, sqlite3.DatabaseError) or isinstance(error, sqlite3.OperationalError):
        return False
    name = getattr(error, "sqlite_errorname", "")
    return name in ("", "SQLITE_NOTADB") or name.startswith("SQLITE_CORRUPT")
