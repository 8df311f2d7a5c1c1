"""The packages depend one way, and the storage engine's layers import downward only.

Read from the source with ast, so imports made only for type checking count too: a circle
through them is still a circle a reader has to untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.bridge_support import REPO

PACKAGES = ("plateau_core", "plateau_spark", "bridge")

# The engine from the bottom up. A module may import its own layer or a lower one; within a
# layer the graph must still be free of circles (checked below).
ENGINE_LAYERS: dict[str, int] = {
    # foundations: names, schemas, checksums, policies and the small types everything uses
    "plateau_core.errors": 0,
    "plateau_core.names": 0,
    "plateau_core.coarsened": 0,
    "plateau_core.schema": 0,
    "plateau_core.schema_merge": 0,
    "plateau_core.stored_names": 0,
    "plateau_core.conform": 0,
    "plateau_core.json_text": 0,
    "plateau_core.checksums": 0,
    "plateau_core.column_stats": 0,
    "plateau_core.bloom": 0,
    "plateau_core.sketches": 0,
    "plateau_core.rollup": 0,
    "plateau_core.segment_stats": 0,
    "plateau_core.producers": 0,
    "plateau_core.policies": 0,
    "plateau_core.adaptive_compression": 0,
    "plateau_core.cache": 0,
    "plateau_core.listener": 0,
    "plateau_core.partition_lock": 0,
    "plateau_core.disk_floor": 0,
    "plateau_core.background": 0,
    "plateau_core.daemon_pool": 0,
    "plateau_core.pace": 0,
    "plateau_core.where": 0,
    "plateau_core.lazy": 0,
    # segment files
    "plateau_core.crc": 1,
    "plateau_core.direct_io": 1,
    "plateau_core.segment_file": 1,
    # the manifest
    "plateau_core.manifest": 2,
    "plateau_core.manifest.models": 2,
    "plateau_core.manifest.engine": 2,
    "plateau_core.manifest.identity": 2,
    "plateau_core.manifest.migrations": 2,
    "plateau_core.manifest.records": 2,
    "plateau_core.manifest.bloom_cache": 2,
    "plateau_core.manifest.listing": 2,
    "plateau_core.manifest.segment_reads": 2,
    "plateau_core.manifest.commit": 2,
    "plateau_core.manifest.consumed": 2,
    "plateau_core.manifest.database": 2,
    "plateau_core.manifest.manifest": 2,
    "plateau_core.manifest.opening": 2,
    "plateau_core.manifest.partition_spans": 2,
    "plateau_core.manifest.produced": 2,
    "plateau_core.manifest.promoted": 2,
    "plateau_core.manifest.swap": 2,
    "plateau_core.manifest.transitions": 2,
    "plateau_core.manifest.unserved": 2,
    "plateau_core.manifest.urls": 2,
    # what the middle layer sees of a store, and per-partition state
    "plateau_core.handle": 3,
    "plateau_core.group_commit": 3,
    "plateau_core.quarantine": 3,
    "plateau_core.topic_schema": 3,
    "plateau_core.slog": 3,
    "plateau_core.sealing": 4,
    "plateau_core.seal_groups": 4,
    "plateau_core.admission": 4,
    # the journal: append groups synced before they are sealed
    "plateau_core.journal_codec": 4,
    "plateau_core.journal_files": 4,
    "plateau_core.journal": 4,
    # reading, checking and retiring segments
    "plateau_core.verify": 4,
    "plateau_core.top_by_time": 4,
    "plateau_core.read_request": 4,
    "plateau_core.reader": 4,
    "plateau_core.retention": 4,
    "plateau_core.topic_drop": 4,
    "plateau_core.recovery": 5,
    "plateau_core.consolidate": 5,
    "plateau_core.rebuild_target": 5,
    "plateau_core.rebuild_report": 5,
    "plateau_core.rebuild_partition": 5,
    "plateau_core.rebuild": 5,
    "plateau_core.seal_pool": 6,
    "plateau_core.ownership": 6,
    "plateau_core.writer": 6,
    "plateau_core.journaled_writer": 6,
    "plateau_core.journal_replay": 6,
    # the facade
    "plateau_core.store": 7,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((REPO / package).rglob("*.py"))}


def imports(path: Path) -> set[str]:
    """Every module `path` imports, as dotted names (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module_name(path).split(".")
                anchor = here if path.name == "__init__.py" else here[:-1]
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                # `from package import module` imports the module; the package's own
                # __init__ only when a name comes from it.
                full = f"{base}.{alias.name}"
                found.add(full if _is_module(full) else base)
    return found


def _is_module(name: str) -> bool:
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def graph(package: str) -> dict[str, set[str]]:
    """package-internal edges, without the package's own __init__ (it re-exports only)."""
    known = modules(package)
    return {
        name: {m for m in imports(path) if m in known and m not in (name, package)}
        for name, path in known.items()
        if name != package
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package: str) -> None:
    assert cycles(graph(package)) == []


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("plateau_core", ("bridge", "plateau_spark", "confluent_kafka", "pyspark", "py4j")),
        ("plateau_spark", ("bridge", "confluent_kafka")),
    ],
)
def test_packages_depend_one_way(package: str, forbidden: tuple[str, ...]) -> None:
    offenders = sorted(
        f"{name} imports {target}"
        for name, path in modules(package).items()
        for target in imports(path)
        if target.split(".")[0] in forbidden
    )
    assert offenders == []


def test_every_engine_module_has_a_layer() -> None:
    assert set(modules("plateau_core")) - {"plateau_core"} == set(ENGINE_LAYERS)


def test_engine_layers_import_downward_only() -> None:
    upward = sorted(
        f"{name} (layer {ENGINE_LAYERS[name]}) imports {target} (layer {ENGINE_LAYERS[target]})"
        for name, targets in graph("plateau_core").items()
        for target in targets
        if ENGINE_LAYERS[target] > ENGINE_LAYERS[name]
    )
    assert upward == []


def test_the_checks_see_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The helpers above find what they are for (so a green run means something)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    probe = REPO / "plateau_core" / "names.py"
    assert "plateau_core.errors" in imports(probe)
    layers = dict(ENGINE_LAYERS)
    edges = graph("plateau_core")
    edges["plateau_core.names"] = edges["plateau_core.names"] | {"plateau_core.store"}
    assert any(layers[t] > layers[n] for n, ts in edges.items() for t in ts)
