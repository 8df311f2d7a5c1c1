"""Load the YAML configuration, apply `PLATEAU__SECTION__KEY` overrides, validate it."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bridge.config.models import Config, KafkaConfig
from bridge.errors import ConfigError

ENV_PREFIX = "PLATEAU__"


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """The validated configuration, or ConfigError naming the file, the key path and why."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text: {exc}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid YAML: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4300 digits, say
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(raw).__name__}")
    shaped = apply_env_overrides(raw, os.environ if env is None else env, source)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        # A secret like "[x, y]" or "{x}" was read as a YAML list or mapping and refused as
        # one: where the key takes a string, it is the string written.
        written = _as_written(raw, shaped, exc)
        if written is None:
            raise ConfigError(format_errors(exc, source)) from None
        try:
            config = Config.model_validate(written)
        except ValidationError:  # the first answer names what is wrong as the user wrote it
            raise ConfigError(format_errors(exc, source)) from None
    return resolve_paths(config, source)


def parse_config(raw: dict[str, Any], source: Path | str = "<config>") -> Config:
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, source)) from None


def resolve_paths(config: Config, source: Path) -> Config:
    """Relative data_dir, replication target, the listener's and the schema registry's TLS
    files are relative to the config file's folder, not the shell's."""
    data_dir = config.storage.data_dir
    if not data_dir.is_absolute():
        storage = config.storage.model_copy(
            update={"data_dir": (source.parent / data_dir).resolve()}
        )
        config = config.model_copy(update={"storage": storage})
    target = config.replication.target
    if target and "://" not in target and not Path(target).is_absolute():
        replication = config.replication.model_copy(
            update={"target": str((source.parent / target).resolve())}
        )
        config = config.model_copy(update={"replication": replication})
    api = config.kafka_api
    if api is not None and api.tls is not None:
        tls = api.tls
        found = {
            name: (source.parent / value).resolve()
            for name in ("certfile", "keyfile", "cafile")
            if isinstance(value := getattr(tls, name), Path) and not value.is_absolute()
        }
        if found:
            api = api.model_copy(update={"tls": tls.model_copy(update=found)})
            config = config.model_copy(update={"kafka_api": api})
    registry = config.schema_registry
    if registry is not None and registry.tls is not None:
        tls_files = {
            name: (source.parent / value).resolve()
            for name in ("cafile", "certfile", "keyfile")
            if isinstance(value := getattr(registry.tls, name), Path) and not value.is_absolute()
        }
        if tls_files:
            registry = registry.model_copy(
                update={"tls": registry.tls.model_copy(update=tls_files)}
            )
            config = config.model_copy(update={"schema_registry": registry})
    return config


def format_errors(exc: ValidationError, source: Path | str) -> str:
    lines = [f"{source}: invalid configuration"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        message = message.removeprefix("Value error, ")
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


def apply_env_overrides(
    raw: dict[str, Any], env: Mapping[str, str], source: Path
) -> list[tuple[list[str], str]]:
    """`PLATEAU__STORAGE__DATA_DIR=/x` sets storage.data_dir; list items by index
    (`PLATEAU__TOPICS__0__FORMAT=json`); under kafka, `SASL_PASSWORD` is `sasl.password`.

    Returns:
        The key paths set to a list or mapping read from a value's YAML, with the text.
    """
    shaped: list[tuple[list[str], str]] = []
    for name, value in sorted(env.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        parts = [p.lower() for p in name.removeprefix(ENV_PREFIX).split("__") if p]
        if not parts:
            continue
        if parts[0] == "kafka" and len(parts) == 2 and parts[1] not in _KAFKA_FIELDS:
            parts[1] = parts[1].replace("_", ".")
        parsed = _env_value(value)
        if not isinstance(parsed, str):
            shaped.append((parts, value))
        _set(raw, parts, parsed, name, source)
    return shaped


def _as_written(
    raw: dict[str, Any], shaped: list[tuple[list[str], str]], exc: ValidationError
) -> dict[str, Any] | None:
    """`raw` with the values of `shaped` that validation refused (at or under their key)
    put back as the text written; None when it refused none of them."""
    refused = [tuple(str(part) for part in error["loc"]) for error in exc.errors()]
    raw = copy.deepcopy(raw)
    changed = False
    for parts, text in shaped:
        key = tuple(parts)
        # At the key, under it, or at its section (librdkafka's properties are checked
        # together, as the kafka section's).
        if any(loc and (loc[: len(key)] == key or key[: len(loc)] == loc) for loc in refused):
            _set(raw, parts, text, "", Path())
            changed = True
    return raw if changed else None


def _env_value(value: str) -> Any:
    """The text as it is (validation turns "30", "true" or "1GiB" into what a key takes),
    or a YAML list or mapping when it is written as one. Read as YAML whole, a secret's
    " #..." was a comment, "0123" an octal 83 and "12:30:00" the number 45000."""
    if value.lstrip()[:1] not in ("[", "{"):
        return value
    try:
        return yaml.safe_load(value)
    except (yaml.YAMLError, RecursionError, ValueError):
        return value  # validated as the string it is


# plateau's own kafka keys keep their underscores; any other key is librdkafka's.
_KAFKA_FIELDS = frozenset(KafkaConfig.model_fields)


def _set(node: Any, parts: list[str], value: Any, env_name: str, source: Path) -> None:
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            # isdecimal, not isdigit: int() refuses digits like "²" that isdigit accepts.
            if not part.isdecimal() or int(part) >= len(node):
                raise ConfigError(f"{env_name}: {source} has no list item {part!r} there")
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"{env_name}: cannot set {part!r} inside a scalar")
        if last:
            node[part] = value
        else:
            node = node.setdefault(part, {})
