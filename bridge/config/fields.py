"""Building blocks of the configuration models: a strict frozen base, sizes, durations."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict

from bridge.config.units import parse_duration, parse_size

Size = Annotated[int, BeforeValidator(parse_size)]
Duration = Annotated[float, BeforeValidator(parse_duration)]

MiB = 1024 * 1024


class Strict(BaseModel):
    """Unknown keys are refused (a typo is an error, not a silent default); models are
    frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def short(text: str) -> str:
    """`text` quoted, cut to a length an error message can carry."""
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."
