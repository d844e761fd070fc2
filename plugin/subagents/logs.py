"""Logging set-up for the CLI and server (the library itself never configures logging)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

OWN_LOGGERS = ("subagents",)
"""Our own loggers; every other one (HTTP clients, SQLAlchemy, MCP, uvicorn) is a library's."""


def configure_logging(level: str = "WARNING", *, json_logs: bool | None = None,
                      library_level: str | None = None, stream: TextIO | None = None) -> None:
    """structlog + stdlib through one formatter; JSON when not on a TTY, no frame locals.

    Args:
        level: The level of our own loggers (``subagents.*``).
        json_logs: JSON lines (default: when ``stream`` is not a terminal).
        library_level: The level of every other logger (the libraries'); default: ``level``,
            but never below WARNING, so ``-v`` and ``--debug`` show our events without the HTTP
            and SQL libraries' chatter (``--debug-libraries`` sets DEBUG here).
        stream: Where the lines go (default: stderr).
    """
    stream = stream or sys.stderr
    if json_logs is None:
        json_logs = not stream.isatty()
    if library_level is None:
        library_level = level if level.upper() in ("WARNING", "ERROR", "CRITICAL") else "WARNING"
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    final: list[structlog.types.Processor] = (
        [structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)),
         structlog.processors.JSONRenderer()]
        if json_logs else [structlog.dev.ConsoleRenderer(
            colors=stream.isatty(), exception_formatter=structlog.dev.plain_traceback)])
    # calls below the level return at once, before any event dict is built; filter_by_level
    # still honours stdlib loggers set to a higher level than the root
    # the list is changed in place: loggers already used (cached on first use) keep reading
    # it, so they follow this configuration too, and a processor added to it later reaches them
    processors = structlog.get_config()["processors"]
    processors[:] = [structlog.stdlib.filter_by_level, *shared,
                     structlog.stdlib.PositionalArgumentsFormatter(),
                     structlog.stdlib.ProcessorFormatter.wrap_for_formatter]
    structlog.configure(
        processors=processors,
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(min(
            logging.getLevelNamesMapping()[level.upper()],
            logging.getLevelNamesMapping()[library_level.upper()])),
        cache_logger_on_first_use=True)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(library_level.upper())
    for name in OWN_LOGGERS:  # their own level only when it differs from the libraries'
        own = level.upper()
        logging.getLogger(name).setLevel(logging.NOTSET if own == library_level.upper() else own)
