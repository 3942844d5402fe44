"""Structured JSON logs in the shape Cloud Logging parses from a function's stdout.

Each record is one JSON line with ``severity``, ``message``, ``time``, the current requestId
under ``logging.googleapis.com/labels`` and the line's ``logging.googleapis.com/
sourceLocation``; extra fields passed as ``extra={"fields": {...}}`` are merged in as
``jsonPayload`` keys. Inside :func:`trace_context` a line carries the request's trace
(``logging.googleapis.com/trace``, ``spanId``, ``trace_sampled``), so Cloud Logging nests it
under the request log of the delivery that ran it. An ERROR line is also an Error Reporting
event (``@type``, ``serviceContext``, and ``context.reportLocation`` when it has no
traceback), so errors are grouped even when no exception was raised.

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
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "flexjobs_request_id", default=None
)
_configured = False

#: The variable infra sets to the source zip's content hash: the version of ERROR lines (read
#: here, not by :class:`~shared.kernel.config.Settings`: a log line needs no settings).
BUILD_ENV = "FLEXJOBS_BUILD"

#: The ``@type`` that makes Error Reporting take a structured log line as an error event.
ERROR_EVENT_TYPE = (
    "type.googleapis.com/google.devtools.clouderrorreporting.v1beta1.ReportedErrorEvent"
)

# W3C Trace Context: version-traceid-parentid-flags, lowercase hex; ff is no version.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
# Google's own header: TRACE_ID/SPAN_ID;o=OPTIONS, the span id in decimal.
_CLOUD_TRACE = re.compile(r"([0-9a-fA-F]{32})(?:/([0-9]{1,20}))?(?:;o=([01]))?")


@dataclass(frozen=True)
class Trace:
    """The trace a request belongs to: its id (32 hex), the caller's span (16 hex), and
    whether the caller sampled it."""

    trace_id: str
    span_id: str | None = None
    sampled: bool = False


_trace: contextvars.ContextVar[Trace | None] = contextvars.ContextVar(
    "flexjobs_trace", default=None
)


def trace_of(headers: Any) -> Trace | None:
    """The trace ``headers`` (a mapping, or Werkzeug's Headers) name: ``traceparent`` (W3C),
    else ``X-Cloud-Trace-Context``; None when neither is there or readable (a bad header
    never fails a delivery).

    Examples:
        >>> trace_of({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
        Trace(trace_id='4bf92f3577b34da6a3ce929d0e0e4736', span_id='00f067aa0ba902b7', sampled=True)
        >>> trace_of({"X-Cloud-Trace-Context": "105445aa7843bc8bf206b12000100000/1;o=1"})
        Trace(trace_id='105445aa7843bc8bf206b12000100000', span_id='0000000000000001', sampled=True)
        >>> trace_of({"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"})
    """
    if not headers:
        return None
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    parent = _TRACEPARENT.fullmatch(lower.get("traceparent", "").strip())
    if parent is not None:
        version, trace_id, span_id, flags, rest = parent.groups()
        # Version 00 has nothing after the flags; all-zero ids are invalid (the spec).
        valid = version != "ff" and not (version == "00" and rest)
        if valid and set(trace_id) != {"0"} and set(span_id) != {"0"}:
            return Trace(trace_id, span_id, bool(int(flags, 16) & 1))
    cloud = _CLOUD_TRACE.fullmatch(lower.get("x-cloud-trace-context", "").strip())
    if cloud is not None and set(cloud.group(1)) != {"0"}:
        span = cloud.group(2)
        span_id = f"{int(span):016x}" if span and 0 < int(span) < 2**64 else None
        return Trace(cloud.group(1).lower(), span_id, cloud.group(3) == "1")
    return None


@contextlib.contextmanager
def trace_context(trace: Trace | None) -> Iterator[None]:
    """Put every log line inside the block in ``trace`` (none: as before)."""
    token = _trace.set(trace)
    try:
        yield
    finally:
        _trace.reset(token)


def _service_context() -> dict[str, str]:
    # Cloud Functions (2nd gen) runs on Cloud Run, which sets K_SERVICE and K_REVISION;
    # FLEXJOBS_BUILD is the source zip's content hash, set by infra/ (the code's version).
    context = {
        "service": os.environ.get("K_SERVICE") or os.environ.get("FUNCTION_TARGET") or "flexjobs"
    }
    version = os.environ.get(BUILD_ENV) or os.environ.get("K_REVISION")
    if version:
        context["version"] = version
    return context


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
        entry["logging.googleapis.com/sourceLocation"] = {
            "file": record.pathname,
            "line": str(record.lineno),  # int64, which LogEntry's JSON form writes as a string
            "function": record.funcName,
        }
        trace = _trace.get()
        if trace is not None:
            project = os.environ.get("GOOGLE_CLOUD_PROJECT")
            name = f"projects/{project}/traces/{trace.trace_id}" if project else trace.trace_id
            entry["logging.googleapis.com/trace"] = name
            if trace.span_id is not None:
                entry["logging.googleapis.com/spanId"] = trace.span_id
            entry["logging.googleapis.com/trace_sampled"] = trace.sampled
        if record.exc_info:
            entry["message"] += "\n" + self.formatException(record.exc_info)
        if record.levelno >= logging.ERROR:
            entry["@type"] = ERROR_EVENT_TYPE
            entry["serviceContext"] = _service_context()
            if not record.exc_info:
                # No traceback in the message: Error Reporting then needs the location.
                entry["context"] = {
                    "reportLocation": {
                        "filePath": record.pathname,
                        "lineNumber": record.lineno,
                        "functionName": record.funcName,
                    }
                }
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
