"""Human sizes (`64MiB`, `1.5GB`) and durations (`10s`, `7d`, `250ms`) for the config file."""

from __future__ import annotations

import re

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


def parse_size(value: object) -> int:
    """Bytes from an int or a string like `512`, `64MiB`, `1.5GB`."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like 64MiB, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative: {value}")
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            unit = (match.group(2) or "B").upper()
            return int(float(match.group(1)) * _SIZE_FACTORS[unit])
    raise ValueError(f"expected a size like 512, 64MiB or 1.5GB, got {value!r}")


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like `250ms`, `10s`, `5m`, `7d`."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 10s, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value}")
        return float(value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return float(match.group(1)) * _DURATION_FACTORS[match.group(2) or "s"]
    raise ValueError(f"expected a duration like 250ms, 10s, 5m or 7d, got {value!r}")
