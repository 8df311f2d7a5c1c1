"""structlog set-up: readable console lines for a person at a terminal, JSON lines for a
collector.

Every lifecycle event carries its topic, partition and offsets as fields; the console
renderer shows them as key=value after the event name, the JSON renderer as keys.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO, cast

import structlog

LogFormat = Literal["auto", "console", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("auto", "console", "json")
# Off only in the test suite: a logger cached on first use keeps the configuration of that
# moment, and structlog.testing.capture_logs in a later test would no longer see it.
CACHE_LOGGERS = True


def configure_logging(level: str = "INFO", fmt: str | None = "auto") -> None:
    """Configure structlog for the whole process.

    `fmt` "auto" (or None) picks the console renderer when stderr is a terminal and JSON
    otherwise; colours only ever go to a terminal.
    """
    if fmt not in (*LOG_FORMATS, None):
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    renderer = _renderer(fmt or "auto", sys.stderr.isatty())
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
        # One write per event (print() makes two): the JSON lines of worker processes sharing
        # serve's stderr do not run into each other.
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=CACHE_LOGGERS,
    )


def _renderer(fmt: str, tty: bool) -> structlog.types.Processor:
    if fmt == "json" or (fmt == "auto" and not tty):
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=tty)


class _CurrentStderr:
    """Writes to whatever sys.stderr is at the time, so a logger cached early keeps working
    when stderr is replaced (embedding, test capture)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_librdkafka = structlog.get_logger("plateau.librdkafka")


class _ToStructlog(logging.Handler):
    """librdkafka's own log lines as DEBUG events: the error callbacks and delivery reports
    already report what matters (rate-limited, without the per-attempt noise of an outage,
    or of a broker still loading its coordinators)."""

    def emit(self, record: logging.LogRecord) -> None:
        _librdkafka.debug("librdkafka_log", level=record.levelname, message=record.getMessage())


def librdkafka_logger() -> logging.Logger:
    """The logger to give confluent-kafka clients instead of their default stderr lines."""
    logger = logging.getLogger("plateau.librdkafka")
    if not logger.handlers:
        logger.addHandler(_ToStructlog())
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    return logger
