"""The configuration reference in docs/configuration.md, generated from the models.

`python -m bridge.config.reference --write docs/configuration.md` refreshes the part of the
file between the markers; a test fails when the file and the models disagree.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from bridge.config.fields import Duration, Size
from bridge.config.models import Config
from bridge.config.units import parse_duration, parse_size

BEGIN = "<!-- reference: generated from bridge/config/models.py -->"
END = "<!-- end of reference -->"


def _unit(field: FieldInfo) -> str | None:
    """'size' or 'duration' when the field parses human units."""
    for meta in field.metadata:
        func = getattr(meta, "func", None)
        if func is parse_size:
            return "size"
        if func is parse_duration:
            return "duration"
    # An optional size or duration (`Size | None`) keeps its parser inside the union.
    name = _type_name(field.annotation)
    return name if name in ("size", "duration") else None


def _type_name(annotation: Any) -> str:
    if annotation == Size:
        return "size"
    if annotation == Duration:
        return "duration"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " \\| ".join(names)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return "mapping"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation)).lower()


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, Path):
        return f"`{value}`"
    unit = _unit(field)
    if unit == "size" and isinstance(value, int):
        return f"`{value // 1024**2}MiB`" if value % 1024**2 == 0 else f"`{value}`"
    if unit == "duration":
        return f"`{value:g}s`"
    return f"`{json.dumps(value)}`"


def _rows(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        annotation = field.annotation
        kind = _unit(field) or _type_name(annotation)
        description = (field.description or "").replace("|", "\\|")
        rows.append((key, kind, _default(field), description))
        inner, suffix = _section(annotation)
        if inner is not None:
            rows += _rows(inner, f"{key}{suffix}")
    return rows


def _section(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds (directly, optionally or as a list) and the key suffix of its
    fields ("." or "[]."), or (None, "") for a plain value."""
    origin = typing.get_origin(annotation)
    if origin is list:
        inner, _ = _section(typing.get_args(annotation)[0])
        return inner, "[]."
    if origin in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _section(models[0]) if len(models) == 1 else (None, "")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "."
    return None, ""


def render_reference() -> str:
    lines = [
        BEGIN,
        "",
        "| key | type | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for key, kind, default, description in _rows(Config, ""):
        lines.append(f"| `{key}` | {kind} | {default} | {description} |")
    lines += [
        "| `kafka.<librdkafka property>` | scalar | | Passed to librdkafka unchanged "
        "(security.protocol, sasl.\\*, ssl.\\*, fetch tuning, group.protocol); "
        "partition.assignment.strategy only as cooperative-sticky, which the workers "
        "need. |",
        "",
        END,
    ]
    return "\n".join(lines)


def splice(document: str, reference: str) -> str:
    head, found, rest = document.partition(BEGIN)
    if not found:
        raise SystemExit(f"marker {BEGIN!r} not found")
    _, found, tail = rest.partition(END)
    if not found:
        raise SystemExit(f"marker {END!r} not found")
    return head + reference + tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="refresh this Markdown file in place")
    args = parser.parse_args()
    if args.write is None:
        sys.stdout.write(render_reference() + "\n")
        return
    args.write.write_text(splice(args.write.read_text(), render_reference()))


if __name__ == "__main__":
    main()
