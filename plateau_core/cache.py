"""The folder plateau keeps downloaded and built artefacts in (Kafka jars, the Spark
extension, local broker state)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """$PLATEAU_CACHE_DIR, else $XDG_CACHE_HOME/plateau, else ~/.cache/plateau."""
    explicit = os.environ.get("PLATEAU_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return (base / "plateau").resolve()
