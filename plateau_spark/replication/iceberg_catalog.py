"""The Iceberg catalog replication commits to: SQL (SQLite beside the store by default, or
PostgreSQL) or REST, chosen by the URI; the warehouse is the replication target."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NotInstalledError
from sqlalchemy.exc import SQLAlchemyError

from plateau_core.errors import InvalidInputError
from plateau_core.manifest.urls import shown_url
from plateau_spark.replication.target import Target, TargetError

CATALOG_FILE = "iceberg_catalog.db"
DAY = 86_400.0


@dataclass(frozen=True)
class IcebergSettings:
    """Where the tables are listed and how they are kept (replication.iceberg)."""

    catalog_uri: str | None = None  # None: SQLite in the store's folder
    catalog_name: str = "plateau"
    namespace: str = "plateau"
    commit_retries: int = 4
    small_file_bytes: int = 32 * 2**20
    snapshot_retention_s: float = 7 * DAY
    min_snapshots: int = 10

    def __post_init__(self) -> None:
        if not self.namespace or any(not part for part in self.namespace.split(".")):
            raise InvalidInputError(f"iceberg namespace {self.namespace!r} has an empty level")

    def identifier(self, topic: str) -> tuple[str, ...]:
        # A tuple, not "namespace.topic": topic names may hold dots of their own.
        return (*self.namespace.split("."), topic)


def catalog_properties(settings: IcebergSettings, target: Target, data_dir: Path) -> dict[str, str]:
    """pyiceberg's properties for the catalog and the warehouse's file IO."""
    uri = settings.catalog_uri or f"sqlite:///{data_dir / CATALOG_FILE}"
    scheme = urlparse(uri).scheme
    if scheme in ("http", "https"):
        properties = {"type": "rest", "uri": uri}
    elif scheme.split("+")[0] in ("sqlite", "postgresql"):
        properties = {"type": "sql", "uri": uri, "init_catalog_tables": "true"}
    else:
        raise InvalidInputError(
            f"iceberg catalog_uri {shown_url(uri)!r}: expected sqlite:///path, "
            "postgresql+psycopg2://... (a SQL catalog) or http(s)://... (a REST catalog)"
        )
    properties["warehouse"] = (
        f"file://{target.root}" if target.scheme == "file" else f"s3://{target.root}"
    )
    properties.update(_s3_properties(target))
    return properties


def _s3_properties(target: Target) -> dict[str, str]:
    if target.scheme != "s3":
        return {}
    s3 = target.s3
    pairs = {
        "s3.endpoint": s3.endpoint_url,
        "s3.region": s3.region or "us-east-1",
        "s3.access-key-id": s3.access_key_id,
        "s3.secret-access-key": s3.secret_access_key,
        "s3.session-token": s3.session_token,
    }
    return {key: value for key, value in pairs.items() if value}


def open_catalog(settings: IcebergSettings, target: Target, data_dir: Path) -> Catalog:
    """The catalog, its namespace created when missing. Raises TargetError naming the
    catalog (its password hidden) when it cannot be reached or its driver is missing."""
    properties = catalog_properties(settings, target, data_dir)
    try:
        catalog = load_catalog(settings.catalog_name, **properties)
        catalog.create_namespace_if_not_exists(tuple(settings.namespace.split(".")))
    except (NotInstalledError, ImportError, SQLAlchemyError, OSError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise TargetError(
            f"cannot open the Iceberg catalog {shown_url(properties['uri'])}: "
            f"{type(exc).__name__}: {detail}"
        ) from exc
    return catalog
