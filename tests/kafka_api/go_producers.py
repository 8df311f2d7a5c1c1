"""The Go producers of tests/kafka_api/go_clients (franz-go, sarama, kafka-go), built once
per source and Go version into plateau's cache folder, and run against a listener."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from plateau_core.cache import default_cache_dir

SOURCE = Path(__file__).parent / "go_clients"
_BUILD_TIMEOUT_S = 900  # the first build downloads the modules
_RUN_TIMEOUT_S = 120


def _go() -> tuple[str, str]:
    """The go command and its version; fails the test, naming what is missing. An older Go
    (1.21 on) fetches the toolchain go.mod names by itself (its GOTOOLCHAIN=auto)."""
    go = shutil.which("go")
    if go is None:
        pytest.fail(
            "the Go client tests need Go (1.26, or 1.21 or later to fetch it; go is not on "
            "PATH): they build franz-go, sarama and kafka-go producers from "
            "tests/kafka_api/go_clients"
        )
    version = subprocess.run(
        [go, "version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    return go, version


@functools.cache
def producers() -> Path:
    """The built program, building it first when this source and Go version have none."""
    go, version = _go()
    digest = hashlib.sha256(version.encode())
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((SOURCE / name).read_bytes())
    folder = default_cache_dir() / "go-clients" / digest.hexdigest()[:16]
    binary = folder / "producers"
    if binary.exists():
        return binary
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        built = Path(tmp) / "producers"
        # -mod=readonly: go.sum pins every module, and a build never rewrites the source
        # folder; -buildvcs=false: nothing of the checkout's git state goes into the binary.
        result = subprocess.run(
            [go, "build", "-mod=readonly", "-buildvcs=false", "-o", str(built), "."],
            cwd=SOURCE,
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT_S,
            check=False,
            env={**os.environ, "CGO_ENABLED": "0"},
        )
        if result.returncode != 0:
            pytest.fail(f"go build of {SOURCE} failed: {result.stderr[-3000:]}")
        staged = Path(tmp) / "done"
        staged.mkdir()
        built.rename(staged / "producers")
        # Atomic: two test processes building at once each rename, the first one wins.
        try:
            staged.rename(folder)
        except OSError:
            if not binary.exists():
                raise
    for stale in folder.parent.iterdir():
        # Builds of an older source: the cache keeps the current one only.
        if stale.is_dir() and stale != folder and not stale.name.startswith("tmp"):
            shutil.rmtree(stale, ignore_errors=True)
    return binary


def produce(
    client: str,
    bootstrap: str,
    topic: str,
    count: int,
    *,
    compression: str = "none",
    idempotent: bool = False,
    sasl: tuple[str, str, str] | None = None,
    timeout_s: float = 60,
) -> list[tuple[bytes, int, int]]:
    """Write `count` records with `client`; (key, partition, offset) of each acknowledged."""
    command = [
        str(producers()),
        f"-client={client}",
        f"-bootstrap={bootstrap}",
        f"-topic={topic}",
        f"-count={count}",
        f"-compression={compression}",
        f"-idempotent={'true' if idempotent else 'false'}",
        f"-timeout={timeout_s}s",
    ]
    if sasl is not None:
        mechanism, user, password = sasl
        command += [f"-sasl={mechanism}", f"-user={user}", f"-password={password}"]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout_s + _RUN_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"{client} failed: {result.stderr[-3000:]}"
    acked = [json.loads(line) for line in result.stdout.splitlines()]
    return [(a["key"].encode(), a["partition"], a["offset"]) for a in acked]
