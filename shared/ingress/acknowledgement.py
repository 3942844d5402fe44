"""The acknowledgement policy every entry point shares, in one place.

A Cloud Function that returns acknowledges its message; one that raises gets it redelivered.
So: a non-retryable flexjobs error is logged and acknowledged (redelivery cannot help), a
retryable one is logged and raised, and anything unexpected is raised as it is.

Every entry point also logs inside the trace of the request that delivered it (the
CloudEvent's ``traceparent`` extension, else the HTTP request's ``traceparent`` or
``X-Cloud-Trace-Context`` header), so its lines nest under that request in Cloud Logging.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

# functions-framework serves every entry point with Flask, and hands a CloudEvent handler the
# event alone: the HTTP request a push delivery came in is only Flask's current request.
import flask

from shared.kernel.errors import FlexjobsError
from shared.kernel.logs import Trace, configure, get_logger, trace_context, trace_of

log = get_logger("entrypoint")

F = TypeVar("F", bound=Callable[..., Any])


def pubsub_handler(fn: F) -> F:
    """Apply the acknowledgement policy to a Pub/Sub CloudEvent handler.

    Examples:
        >>> @pubsub_handler
        ... def handle(event): ...
    """

    @functools.wraps(fn)
    def wrapper(event: Any) -> Any:
        configure()
        with trace_context(_trace_of_event(event)):
            return _acknowledged(fn, event)

    return wrapper  # type: ignore[return-value]


def http_handler(fn: F) -> F:
    """Run an HTTP handler in the trace of its request (the status page)."""

    @functools.wraps(fn)
    def wrapper(request: Any) -> Any:
        configure()
        with trace_context(trace_of(getattr(request, "headers", None))):
            return fn(request)

    return wrapper  # type: ignore[return-value]


def _acknowledged(fn: Callable[[Any], Any], event: Any) -> Any:
    try:
        return fn(event)
    except FlexjobsError as exc:
        fields = {"eventId": _event_id(event), "error": type(exc).__name__}
        if exc.retryable:
            log.warning(f"transient fault, redelivery requested: {exc}", extra={"fields": fields})
            raise
        log.error(f"permanent error, message acknowledged: {exc}", extra={"fields": fields})
        return None


def _event_id(event: Any) -> str | None:
    try:
        return str(event["id"])
    except (KeyError, TypeError):
        # Not a CloudEvent-like mapping: there is no id to log.
        return None


def _trace_of_event(event: Any) -> Trace | None:
    """The CloudEvent's own ``traceparent`` (the Distributed Tracing extension), else the
    headers of the HTTP request functions-framework is serving it in (push deliveries)."""
    try:
        extension = event["traceparent"]
    except (KeyError, TypeError):
        extension = None
    if isinstance(extension, str):
        trace = trace_of({"traceparent": extension})
        if trace is not None:
            return trace
    return trace_of(flask.request.headers) if flask.has_request_context() else None
