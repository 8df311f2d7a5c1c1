"""What the engine's middle layer needs of a store: its data folder and its manifest.

The writer, reader, recovery, verification and retention take a StoreHandle instead of the
Store facade, so they import the manifest below them and never the Store above them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from plateau_core.manifest import Manifest, SegmentRecord


class StoreHandle(Protocol):
    @property
    def data_dir(self) -> Path:
        """The folder holding topics/{topic}/{partition}/ segment files."""
        ...

    @property
    def manifest(self) -> Manifest:
        """The database that records the segments."""
        ...

    def segment_path(self, segment: SegmentRecord) -> Path:
        """Where the file of a manifest row is."""
        ...
