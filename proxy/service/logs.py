"""Structured logs (structlog): one line per probe, per capture and per miss.

``configure_logging(level, fmt)`` is called once by ``proxy serve``; library
code only calls ``structlog.get_logger`` (or the standard ``logging``). Every
line goes through one renderer (issue 23): structlog's own events, and the
standard library's records (uvicorn, Alembic, APScheduler, the feed layer)
through a :class:`structlog.stdlib.ProcessorFormatter` on the root logger, so
``PROXY_LOG_FORMAT=json`` gives one JSON object per line and nothing else.
APScheduler's INFO chatter (a line per job run, every minute) is logged at
DEBUG. Python warnings are logged too (``logging.captureWarnings``).
"""

from __future__ import annotations

import logging
import sys

import structlog

#: Database drivers whose DEBUG output carries SQL parameters (secrets): never below INFO.
DRIVER_LOGGERS = ("aiosqlite", "asyncpg")

#: Loggers whose INFO records are routine chatter, logged at DEBUG ("Running job …" every minute).
CHATTY_LOGGERS = ("apscheduler",)


class _DemoteChatter(logging.Filter):
    """Logs :data:`CHATTY_LOGGERS`' INFO records at DEBUG: shown only when DEBUG is asked for."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and record.name.startswith(CHATTY_LOGGERS):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return self.level <= logging.DEBUG
        return True


def configure_logging(level: str = "INFO", fmt: str = "console") -> None:
    """JSON lines (``fmt="json"``, for collectors) or a readable console format, on stderr."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    numeric = logging.getLevelName(level)
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            timestamper,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # The standard library's records (uvicorn, Alembic, APScheduler, …) in the same format:
    # ``event`` is the message, ``logger`` the logger's name.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            timestamper,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    ))
    handler.addFilter(_DemoteChatter(numeric))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
    logging.captureWarnings(True)
    # Uvicorn's own loggers keep their handlers unless told otherwise: route them to the root.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
    # aiosqlite's DEBUG lines echo every SQL statement with its parameters: feed URLs with
    # their secrets, ping tokens, key hashes (issue 22). SQLAlchemy keeps its own loggers
    # at WARNING unless asked; do the same for the driver, whatever PROXY_LOG_LEVEL says.
    for name in DRIVER_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.INFO, numeric))
