"""The one error hierarchy of flexjobs.

Every error carries a ``retryable`` class attribute. Entry points rely on it: a retryable error
is raised out of the function so Pub/Sub redelivers the message; a non-retryable one is
acknowledged and recorded, because delivering it again can never succeed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One problem with a request, at an exact field path such as ``customJob.jobSpec``."""

    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class FlexjobsError(Exception):
    """Base of every flexjobs error."""

    retryable: bool = False


class InvalidRequest(FlexjobsError, ValueError):
    """A request that can never succeed; it carries every problem found, not just the first.

    Examples:
        >>> err = InvalidRequest([FieldError("customJob", "is required")])
        >>> err.errors[0].path
        'customJob'
    """

    retryable = False
    #: What the message says is invalid.
    what = "invalid request"

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        summary = "; ".join(f"{e.path}: {e.message}" for e in self.errors[:5])
        more = f" (+{len(self.errors) - 5} more)" if len(self.errors) > 5 else ""
        super().__init__(f"{self.what}: {summary}{more}")


class InvalidConfiguration(InvalidRequest):
    """A file an operator deploys (the queue file) that does not validate: every problem at
    its path, as for a request. A request read against it could never succeed either, so it is
    never retryable.

    Examples:
        >>> str(InvalidConfiguration([FieldError("queues[0].name", "is required")]))
        'invalid configuration: queues[0].name: is required'
    """

    what = "invalid configuration"


@contextmanager
def reading_untrusted(what: str) -> Iterator[None]:
    """Read untrusted input (a message, a request file) so that it can only be refused:
    any exception but a flexjobs error becomes :class:`InvalidRequest`, with its cause.

    Reading is pure (decoding, parsing, validating), so a failure there is the input's, or a
    bug it reaches: redelivering it would fail again, for ever (an Eventarc event is retried
    for 24 hours, killing an instance each time on a MemoryError). Refused, it is recorded
    and acknowledged, and the cause is logged with the rejection.

    Examples:
        >>> try:
        ...     with reading_untrusted("the message"):
        ...         {}["missing"]
        ... except UnreadableInput as err:
        ...     print(type(err).__name__, err.retryable, err)
        UnreadableInput False invalid request: $: the message could not be read (KeyError)
    """
    try:
        yield
    except FlexjobsError:
        raise
    except Exception as exc:
        problem = f"{what} could not be read ({type(exc).__name__})"
        raise UnreadableInput([FieldError("$", problem)]) from exc


class UnreadableInput(InvalidRequest):
    """Reading a request raised what no check foresaw (:func:`reading_untrusted`): refused like
    any invalid request, and its cause is logged with the rejection."""


class ConfigurationError(FlexjobsError):
    """A client (the ``flexjobs`` library or command) cannot reach flexjobs as configured: no
    project, no credentials, an emulator not reachable, the topic not found, permission
    denied. Nothing was sent; fix the configuration and call again."""


class RequestNotFound(FlexjobsError, LookupError):
    """No record and no rejection holds this requestId (not published yet, still in flight,
    or another project)."""

    def __init__(self, request_id: str, project: str) -> None:
        self.request_id = request_id
        self.project = project
        super().__init__(
            f"no request {request_id!r} in project {project}"
            " (not published yet, still in flight, or another project?)"
        )


class BackendRejected(FlexjobsError):
    """Vertex AI refused the job for good (for example INVALID_ARGUMENT)."""

    retryable = False


class JobGone(BackendRejected):
    """Vertex AI has no such job (NOT_FOUND): deleted, or never made. It holds nothing."""


class EndpointGone(BackendRejected):
    """A Vertex AI endpoint no longer exists (NOT_FOUND): whatever was deployed on it is gone
    with it."""


class ObjectGone(FlexjobsError):
    """The uploaded object's generation no longer exists (replaced or deleted): it can never
    be read again."""

    retryable = False


class WatchTooLarge(FlexjobsError):
    """The tick's watch list would not fit its stored bound: the tick reads every record
    instead (as without a list), which is slower, never wrong."""

    retryable = False


class TransientError(FlexjobsError):
    """A fault that may pass: the message must be redelivered."""

    retryable = True


class BackendUnavailable(TransientError):
    """Vertex AI could not be reached or answered UNAVAILABLE / RESOURCE_EXHAUSTED / timeout."""


class QuotaExhausted(BackendUnavailable):
    """Vertex AI answered RESOURCE_EXHAUSTED: a project quota is used up for now.

    A create refused for quota is parked and retried with backoff from the scheduler tick,
    rather than by redelivery (which would hammer the quota every few seconds).
    """


class OutcomeUnknown(BackendUnavailable):
    """A create timed out or broke off after it was sent: it may have happened.

    The submission claim is kept until it expires, so the redelivery's label lookup runs only
    once the job, if Vertex made it, is there to be found.
    """


class QuotaUnreadable(TransientError):
    """The project's quota limits could not be read (the Cloud Quotas API is not reachable,
    not enabled, refused the read, or answered more than a read may hold). The tick keeps the
    limits it read last and records why; it is retryable: the next read may succeed."""


class StoreUnavailable(TransientError):
    """Firestore could not be reached or the transaction could not commit."""


class PublishFailed(TransientError):
    """A Pub/Sub publish did not complete."""


class SubmissionInProgress(TransientError):
    """Another delivery of the same request holds the submission claim right now."""


class ClaimExpired(SubmissionInProgress):
    """This delivery's submission claim expired before its create was sent (a lookup, or the
    building of the create, outlasted it): another delivery may hold the submission now, and
    may have created already; nothing was sent, and the redelivery looks up again."""


class HintDeferred(TransientError):
    """A hint arrived inside its job's coalescing window; redelivery reads the job later."""
