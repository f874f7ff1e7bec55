"""Structured logs (structlog): one line per probe, per capture and per miss.

``configure_logging(level, fmt)`` is called once by ``proxy serve``; library
code only calls ``structlog.get_logger``. It deliberately leaves the
stdlib ``logging`` tree alone except for routing it through the same renderer.
"""

from __future__ import annotations

import logging
import sys

import structlog

#: Database drivers whose DEBUG output carries SQL parameters (secrets): never below INFO.
DRIVER_LOGGERS = ("aiosqlite", "asyncpg")


def configure_logging(level: str = "INFO", fmt: str = "console") -> None:
    """JSON lines (``fmt="json"``, for collectors) or a readable console format, on stderr."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    # aiosqlite's DEBUG lines echo every SQL statement with its parameters: feed URLs with
    # their secrets, ping tokens, key hashes (issue 22). SQLAlchemy keeps its own loggers
    # at WARNING unless asked; do the same for the driver, whatever PROXY_LOG_LEVEL says.
    for name in DRIVER_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.INFO, logging.getLevelName(level)))

