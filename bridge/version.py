"""plateau's version as installed (the package's metadata): what `plateau --version`
prints, serve logs at start and /metrics exports, so an operator knows which release runs
before and after an upgrade (docs/operations.md)."""

from __future__ import annotations

from functools import cache
from importlib import metadata


@cache
def version() -> str:
    try:
        return metadata.version("plateau")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"
