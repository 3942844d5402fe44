"""The acknowledgement policy every entry point shares, in one place.

A Cloud Function that returns acknowledges its message; one that raises gets it redelivered.
So: a non-retryable flexjobs error is logged and acknowledged (redelivery cannot help), a
retryable one is logged and raised, and anything unexpected is raised as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from shared.kernel.errors import FlexjobsError
from shared.kernel.logs import configure, get_logger

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
        try:
            return fn(event)
        except FlexjobsError as exc:
            fields = {"eventId": _event_id(event), "error": type(exc).__name__}
            if exc.retryable:
                log.warning(
                    f"transient fault, redelivery requested: {exc}", extra={"fields": fields}
                )
                raise
            log.error(f"permanent error, message acknowledged: {exc}", extra={"fields": fields})
            return None

    return wrapper  # type: ignore[return-value]


def _event_id(event: Any) -> str | None:
    try:
        return str(event["id"])
    except (KeyError, TypeError):
        # Not a CloudEvent-like mapping: there is no id to log.
        return None
