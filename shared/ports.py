"""Ports: what the services need from the outside world, as bare nouns.

Adapters are named after their backend (``FirestoreJobStore``, ``VertexJobBackend``); the fakes
used by unit and functional tests are ``InMemory…``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from shared.domain.jobs import VertexJob
from shared.domain.request import JobRequest
from shared.errors import FieldError


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming a request for submission.

    Either ``record`` is the already-submitted record (a duplicate delivery), or ``token`` is a
    fresh claim this delivery now holds.
    """

    token: str | None = None
    record: dict[str, Any] | None = None
    taken_over: bool = False


@dataclass(frozen=True)
class Submission:
    """What to write once the Vertex job of an attempt exists."""

    request_id: str
    attempt: int
    vertex_job: VertexJob
    strategy: str
    location: str
    resumed_from: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class JobStore(Protocol):
    """The job records (Firestore ``jobs`` and their ``attempts``)."""

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claim:
        """Create the record in ACCEPTED, or report the existing one; see :class:`Claim`.

        Raises:
            SubmissionInProgress: another live claim holds the request.
            StoreUnavailable: Firestore could not be reached.
        """
        ...

    def record_submission(self, token: str, submission: Submission, now: datetime) -> None:
        """Record the Vertex job of an attempt (idempotent for the same job)."""
        ...

    def release(self, request_id: str, token: str, now: datetime) -> None:
        """Give up a claim this delivery holds, so a redelivery need not wait for its TTL."""
        ...

    def record_failure(self, request_id: str, reason: str, now: datetime) -> None:
        """Mark a claimed request FAILED for good (Vertex refused it), keeping the reason."""
        ...

    def get(self, request_id: str) -> dict[str, Any] | None:
        """The record as stored, or None."""
        ...

    def find_by_job_id(self, job_id: str) -> str | None:
        """The requestId whose current attempt is Vertex job ``job_id``, or None."""
        ...

    def active(self) -> list[dict[str, Any]]:
        """Every record not yet in a terminal state."""
        ...

    def begin_read(self, request_id: str, now: datetime, interval_seconds: float) -> bool:
        """Take the right to read Vertex for this job now; False inside the coalescing window."""
        ...

    def apply_observation(self, request_id: str, job: VertexJob, now: datetime) -> str | None:
        """Reconcile the record to ``job`` in one transaction; the new state, or None."""
        ...


class JobBackend(Protocol):
    """Vertex AI: where jobs run."""

    def check(self, request: JobRequest) -> list[FieldError]:
        """Problems Vertex would refuse the body for (unknown fields, wrong types)."""
        ...

    def find(self, request_label: str, attempt: int, location: str) -> VertexJob | None:
        """The job of this request and attempt already created, looked up by its labels."""
        ...

    def create(self, request: JobRequest, labels: Mapping[str, str], location: str) -> VertexJob:
        """Create the job of one attempt."""
        ...

    def get(self, name: str) -> VertexJob:
        """Read one job's authoritative state."""
        ...

    def list_labelled(self, location: str) -> Iterable[VertexJob]:
        """Every flexjobs-labelled job in ``location``, paging through the list call."""
        ...

    def cancel(self, name: str) -> None:
        """Ask Vertex to cancel a job."""
        ...


class Notifier(Protocol):
    """The notifications topic."""

    def notify(self, message: Mapping[str, Any]) -> None:
        """Publish one notification and wait until Pub/Sub has it."""
        ...


class RejectionLog(Protocol):
    """Where refused requests are kept (Firestore ``rejections``)."""

    def record(self, rejection_id: str, document: Mapping[str, Any]) -> None:
        """Write (or overwrite, on redelivery) the rejection document."""
        ...
