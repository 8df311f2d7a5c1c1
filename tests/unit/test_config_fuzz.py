"""Fuzzing the configuration's entry points: whatever the file or the environment holds,
loading ends in a Config or in ConfigError (which names the key and why), never in another
exception; the unit parsers end in a value or in ValueError (which pydantic turns into a
named ConfigError)."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.config import Config, load_config, parse_config
from bridge.config.units import parse_duration, parse_size
from bridge.errors import ConfigError

FUZZ = settings(
    max_examples=int(os.environ.get("PLATEAU_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Keys the models know, so that random documents reach the validators and not only the
# "unknown key" refusal.
KNOWN_KEYS = [
    "kafka",
    "storage",
    "defaults",
    "topics",
    "replication",
    "spark",
    "metrics",
    "shutdown_timeout",
    "bootstrap_servers",
    "group_id",
    "auto_offset_reset",
    "isolation_level",
    "poll_batch",
    "start_without_watermark",
    "data_dir",
    "manifest_url",
    "max_bytes",
    "min_free_disk",
    "memory_budget",
    "writer_threads",
    "compression",
    "compression_adaptive",
    "deletion_grace",
    "retention_interval",
    "roll",
    "retention",
    "max_rows",
    "max_age",
    "max_segments",
    "require_replicated",
    "source",
    "name",
    "format",
    "schema",
    "timestamp",
    "key",
    "headers",
    "on_error",
    "dlq",
    "target",
    "interval",
    "file_size",
    "s3",
    "endpoint_url",
    "secret_access_key",
    "master",
    "conf",
    "enabled",
    "listen",
    "stall_after",
    "security.protocol",
    "fetch.max.bytes",
]
UNITS = ["", "B", "KB", "KiB", "MiB", "GB", "PiB", "ms", "s", "m", "h", "d", "w", "parsec", "µs"]

numbers = st.one_of(
    st.integers(),
    st.integers(min_value=10**18, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
)
unit_texts = st.builds(
    lambda sign, digits, fraction, space, unit: f"{sign}{digits}{fraction}{space}{unit}",
    st.sampled_from(["", "-", "+", " "]),
    st.text("0123456789", min_size=1, max_size=400),
    st.sampled_from(["", ".5", ".", ".0000001", "e9", "e999"]),
    st.sampled_from(["", " ", "\t", "\n"]),
    st.sampled_from(UNITS),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    numbers,
    st.text(max_size=30),
    unit_texts,
    st.sampled_from(
        [
            "raw",
            "json",
            "arrow",
            "dlq",
            "skip",
            "fail",
            "regex:.*",
            "regex:(",
            "{source}",
            "landed-{source}",
            "../../etc",
            "/etc/passwd",
            "a\x00b",
            "..",
            "x" * 300,
            "127.0.0.1:0",
            "field:ts",
            "kafka",
            "int",
            "\udcff",
        ]
    ),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=12), st.integers(), st.none())
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)

VALID_TOPIC = {"source": "events"}


def _mutated(base: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    """`base` with the value at `path` (created as needed) replaced by `value`."""
    out = yaml.safe_load(yaml.safe_dump(base))  # a deep copy of plain data
    node = out
    for part in path[:-1]:
        child = node.get(part) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value
    return out


KEY_PATHS = [
    ["kafka", "poll_batch"],
    ["kafka", "bootstrap_servers"],
    ["kafka", "security.protocol"],
    ["storage", "memory_budget"],
    ["storage", "max_bytes"],
    ["storage", "writer_threads"],
    ["storage", "deletion_grace"],
    ["storage", "data_dir"],
    ["defaults", "roll", "max_age"],
    ["defaults", "roll", "max_bytes"],
    ["defaults", "retention", "max_segments"],
    ["replication", "file_size"],
    ["replication", "topics"],
    ["metrics", "listen"],
    ["metrics", "stall_after"],
    ["shutdown_timeout"],
    ["topics"],
]


def _check_outcome(produce: Any) -> None:
    """Loading either gives a usable Config or ConfigError; anything else is a bug."""
    try:
        config = produce()
    except ConfigError as exc:
        assert str(exc).strip(), "an empty ConfigError message"
        return
    assert isinstance(config, Config)
    # What serve does with a Config right away must work too.
    config.redacted()
    for mapping in config.topics:
        config.roll_policy(mapping)
        config.retention_policy(mapping)
        assert all(math.isfinite(v) for v in (config.shutdown_timeout,))


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="config-fuzz-") as name:
        yield Path(name)


@FUZZ
@given(documents)
def test_parse_config_of_any_document(document: Any) -> None:
    if not isinstance(document, dict):
        document = {"topics": [VALID_TOPIC], "storage": document}
    _check_outcome(lambda: parse_config(document))


@FUZZ
@given(st.sampled_from(KEY_PATHS), documents)
def test_one_key_of_a_valid_config_replaced(path: list[str], value: Any) -> None:
    base = {"topics": [VALID_TOPIC]}
    _check_outcome(lambda: parse_config(_mutated(base, path, value)))


@FUZZ
@given(
    st.lists(
        st.fixed_dictionaries(
            {"source": scalars},
            optional={
                "name": scalars,
                "format": scalars,
                "on_error": scalars,
                "dlq": scalars,
                "schema": documents,
                "timestamp": scalars,
                "roll": documents,
            },
        ),
        max_size=3,
    )
)
def test_topic_mappings(topics: list[dict[str, Any]]) -> None:
    _check_outcome(lambda: parse_config({"topics": topics}))


@FUZZ
@given(st.one_of(documents.map(lambda d: yaml.safe_dump(d, allow_unicode=True)), st.text()))
def test_load_config_of_any_file_text(folder: Path, text: str) -> None:
    path = folder / "plateau.yaml"
    try:
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        path.write_bytes(text.encode("utf-8", errors="replace"))
    _check_outcome(lambda: load_config(path, env={}))


@FUZZ
@given(st.binary(max_size=200))
def test_load_config_of_any_file_bytes(folder: Path, data: bytes) -> None:
    path = folder / "plateau.yaml"
    path.write_bytes(data)
    _check_outcome(lambda: load_config(path, env={}))


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000 + "]" * 5000,  # nested deeper than the YAML parser's recursion
        "a: " + "{b: " * 3000 + "1" + "}" * 3000,
        "topics:\n- source: events\nstorage: &a [*a]\n",  # an alias refers to itself
        "topics: [{source: events}]\nshutdown_timeout: " + "9" * 5000,  # int() refuses it
        "topics: [{source: events}]\nstorage: {max_bytes: 0x" + "f" * 5000 + "}",
        "topics: [{source: events}]\nshutdown_timeout: .nan",
        "topics: [{source: events}]\nshutdown_timeout: .inf",
        "? [a]\n: 1\n",
    ],
)
def test_load_config_of_pathological_yaml(folder: Path, text: str) -> None:
    path = folder / "plateau.yaml"
    path.write_text(text)
    _check_outcome(lambda: load_config(path, env={}))


env_names = st.builds(
    lambda parts: "PLATEAU__" + "__".join(parts),
    st.lists(
        st.one_of(
            st.sampled_from(["KAFKA", "STORAGE", "TOPICS", "0", "5", "SOURCE", "MEMORY_BUDGET"]),
            st.text(max_size=6),
        ),
        min_size=0,
        max_size=4,
    ),
)


@pytest.mark.parametrize(
    "env",
    [
        {"PLATEAU__TOPICS__²__FORMAT": "json"},  # isdigit() but not int()
        {"PLATEAU__SHUTDOWN_TIMEOUT": "9" * 5000},
        {"PLATEAU__STORAGE__MEMORY_BUDGET": "[" * 5000},
        {"PLATEAU__STORAGE": "x", "PLATEAU__STORAGE__MAX_BYTES": "1"},
        {"PLATEAU__": "x", "PLATEAU____": "y"},
    ],
)
def test_environment_override_edge_cases(folder: Path, env: dict[str, str]) -> None:
    path = folder / "plateau.yaml"
    path.write_text(yaml.safe_dump({"topics": [VALID_TOPIC]}))
    _check_outcome(lambda: load_config(path, env=env))


@FUZZ
@given(st.dictionaries(env_names, st.text(max_size=20), max_size=4))
def test_environment_overrides_of_any_shape(folder: Path, env: dict[str, str]) -> None:
    path = folder / "plateau.yaml"
    path.write_text(yaml.safe_dump({"topics": [VALID_TOPIC], "storage": {"max_bytes": "1GiB"}}))
    _check_outcome(lambda: load_config(path, env=env))


@FUZZ
@given(st.one_of(unit_texts, scalars, documents))
def test_parse_size_gives_bytes_or_value_error(value: Any) -> None:
    try:
        size = parse_size(value)
    except ValueError as exc:
        assert str(exc)
        return
    assert isinstance(size, int) and size >= 0


@FUZZ
@given(st.one_of(unit_texts, scalars, documents))
def test_parse_duration_gives_seconds_or_value_error(value: Any) -> None:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        assert str(exc)
        return
    assert isinstance(seconds, float) and math.isfinite(seconds) and seconds >= 0
