"""Logging set-up for the CLI and server (the library itself never configures logging)."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "WARNING", *, json_logs: bool | None = None) -> None:
    """structlog + stdlib through one formatter; JSON when not on a TTY, no frame locals."""
    if json_logs is None:
        json_logs = not sys.stderr.isatty()
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
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback)])
    # calls below the level return at once, before any event dict is built; filter_by_level
    # still honours stdlib loggers set to a higher level than the root
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared,
                    structlog.stdlib.PositionalArgumentsFormatter(),
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]),
        cache_logger_on_first_use=True)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
