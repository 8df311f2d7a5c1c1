"""structlog set-up: JSON lines when not on a terminal, readable console output on one."""

from __future__ import annotations

import logging
import sys
from typing import TextIO, cast

import structlog


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """Configure structlog for the whole process; `json=None` decides by stderr being a TTY."""
    as_json = not sys.stderr.isatty() if json is None else json
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )


class _CurrentStderr:
    """Writes to whatever sys.stderr is at the time, so a logger cached early keeps working
    when stderr is replaced (embedding, test capture)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()
