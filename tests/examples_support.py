"""The examples/ folder in tests: its scripts loaded as modules (their folders are not
packages), its configs loaded as a user would, with secrets and ports from the environment."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from bridge.config import Config, load_config
from tests.bridge_support import REPO

EXAMPLES = REPO / "examples"


def example_module(relative: str) -> ModuleType:
    """examples/<relative> imported under a name of its own, so that two examples' read.py
    or main() never shadow each other."""
    path = EXAMPLES / relative
    name = "example_" + relative.removesuffix(".py").replace("/", "_").replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def example_config(path: Path, env: Mapping[str, str] | None = None) -> Config:
    """An example's config as `plateau serve --config` loads it, with only `env` as the
    environment (the test process' own PLATEAU__ variables must not leak in)."""
    return load_config(path, env=dict(env or {}))
