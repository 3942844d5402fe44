"""Structured JSON logs in the shape Cloud Logging parses from a function's stdout.

Each record is one JSON line with ``severity``, ``message``, ``time`` and the current
requestId under ``logging.googleapis.com/labels``; extra fields passed as ``extra={"fields":
{...}}`` are merged in as ``jsonPayload`` keys.

Examples:
    >>> log = get_logger(__name__)
    >>> with request_context("seed-1"):
    ...     log.info("job created", extra={"fields": {"vertexJob": "projects/p/..."}})
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "flexjobs_request_id", default=None
)
_configured = False


class CloudLoggingFormatter(logging.Formatter):
    """Format a record as one Cloud Logging structured JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname if record.levelname != "WARN" else "WARNING",
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "logger": record.name,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        request_id = _request_id.get()
        if request_id is not None:
            entry["logging.googleapis.com/labels"] = {"requestId": request_id}
        if record.exc_info:
            entry["message"] += "\n" + self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure() -> None:
    """Route the ``flexjobs`` loggers to stdout as JSON lines (idempotent)."""
    global _configured
    if _configured:
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(CloudLoggingFormatter())
    root = logging.getLogger("flexjobs")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False
    _configured = True


def get_logger(name: str) -> logging.Logger:
    """A logger under the ``flexjobs`` hierarchy."""
    return logging.getLogger(f"flexjobs.{name}")


@contextlib.contextmanager
def request_context(request_id: str | None) -> Iterator[None]:
    """Label every log line inside the block with ``request_id``."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)
