"""Human sizes (`64MiB`, `1.5GB`) and durations (`10s`, `7d`, `250ms`) for the config file."""

from __future__ import annotations

import math
import re
from decimal import Decimal

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_FACTORS = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "PB": 1000**5,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
    "PIB": 1024**5,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_DURATION_FACTORS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# Sizes end up in int64 columns and counters; durations in thread waits, whose limit
# (threading.TIMEOUT_MAX) is about 292 years.
MAX_SIZE = 2**63 - 1
MAX_DURATION = 100 * 365 * 86400.0


def parse_size(value: object) -> int:
    """Bytes from an int or a string like `512`, `64MiB`, `1.5GB`."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like 64MiB, got {_show(value)}")
    size: int | None = None
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative: {_show(value)}")
        size = value
    elif isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            unit = (match.group(2) or "B").upper()
            # Decimal, not float: "99999...9PiB" must not become inf on the way.
            size = int(Decimal(match.group(1)) * _SIZE_FACTORS[unit])
    if size is not None:
        if size > MAX_SIZE:
            raise ValueError(f"a size must be at most {MAX_SIZE} bytes, got {_show(value)}")
        return size
    raise ValueError(f"expected a size like 512, 64MiB or 1.5GB, got {_show(value)}")


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like `250ms`, `10s`, `5m`, `7d`."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 10s, got {_show(value)}")
    seconds: float | None = None
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {_show(value)}")
        seconds = float(value) if value <= MAX_DURATION else math.inf
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            seconds = float(
                Decimal(match.group(1)) * Decimal(str(_DURATION_FACTORS[match.group(2) or "s"]))
            )
    if seconds is not None:
        if not seconds <= MAX_DURATION:  # also refuses nan
            raise ValueError(
                f"a duration must be a number of seconds up to 100 years, got {_show(value)}"
            )
        return seconds
    raise ValueError(f"expected a duration like 250ms, 10s, 5m or 7d, got {_show(value)}")


def _show(value: object) -> str:
    """The value for an error message: short, and never failing (str() of an int of more
    than 4300 digits raises)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a number of about {value.bit_length() * 0.30103:.0f} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
