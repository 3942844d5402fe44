"""Ports: what the services need from the outside world, as bare nouns.

Adapters are named after their backend (``FirestoreJobStore``, ``VertexJobBackend``); the fakes
used by unit and functional tests are ``InMemory…``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from shared.domain.checkpoints import Checkpoint
from shared.domain.deployments import OperationStatus
from shared.domain.hints import HintAction
from shared.domain.jobs import Change, VertexJob
from shared.domain.records import Claim, Submission
from shared.domain.request import JobRequest

# Claim and Submission are part of the JobStore contract, so they are exported from here too.
__all__ = [
    "CheckpointStore",
    "Claim",
    "JobBackend",
    "JobStore",
    "Notifier",
    "RejectionLog",
    "Submission",
]


class JobStore(Protocol):
    """The job records (Firestore ``jobs`` and their ``attempts``)."""

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claim:
        """Create the record in ACCEPTED, or report the existing one; see :class:`Claim`.

        Raises:
            SubmissionInProgress: another live claim holds the request.
            StoreUnavailable: Firestore could not be reached.
        """
        ...

    def record_submission(self, token: str, submission: Submission, now: datetime) -> bool:
        """Record the Vertex job of an attempt (idempotent for the same job).

        Returns False, writing nothing, when the record will not take this job (see
        :func:`~shared.domain.records.submission_write`): the caller must cancel it.
        """
        ...

    def create_tombstone(self, request_id: str, record: Mapping[str, Any]) -> bool:
        """Create the record ``record`` only if none exists; False when one does."""
        ...

    def release(self, request_id: str, token: str, now: datetime) -> None:
        """Give up a claim this delivery holds, so a redelivery need not wait for its TTL."""
        ...

    def get(self, request_id: str) -> dict[str, Any] | None:
        """The record as stored, or None."""
        ...

    def get_attempt(self, request_id: str, attempt: int) -> dict[str, Any] | None:
        """One attempt document, or None."""
        ...

    def update_attempt(self, request_id: str, attempt: int, fields: Mapping[str, Any]) -> None:
        """Merge ``fields`` into one attempt document."""
        ...

    def find_by_job_id(self, job_id: str) -> str | None:
        """The requestId one of whose attempts is Vertex job ``job_id``, or None."""
        ...

    def active(self) -> list[dict[str, Any]]:
        """Every record not yet in a terminal state."""
        ...

    def ended_since(self, since: datetime) -> list[dict[str, Any]]:
        """Every record that reached a terminal state at or after ``since`` (``endedAt``)."""
        ...

    def begin_read(
        self, request_id: str, now: datetime, interval_seconds: float, published: datetime
    ) -> tuple[HintAction, datetime | None]:
        """Apply :func:`~shared.domain.hints.take_hint` in one transaction.

        Returns the action and the lease's start before this hint (for a trailing read).
        """
        ...

    def renew_read(self, request_id: str, now: datetime) -> None:
        """Start a trailing read: the lease now dates from ``now``, nothing is pending."""
        ...

    def release_reader(self, request_id: str) -> None:
        """Drop the read lease (after a failed read), so the next hint reads at once."""
        ...

    def transact(
        self, request_id: str, decide: Callable[[dict[str, Any]], Change | None]
    ) -> Change | None:
        """Read the record, let ``decide`` compute a change, write it, in one transaction."""
        ...

    def due_submissions(self, now: datetime) -> list[str]:
        """requestIds whose next submission (a retry, or a parked attempt) is due."""
        ...

    def claim_retry(
        self, request_id: str, attempt: int, now: datetime, ttl_seconds: float
    ) -> str | None:
        """Claim the submission of ``attempt`` (see
        :func:`~shared.domain.records.submission_claimable`); None when it may not be."""
        ...

    def with_outbox(self) -> list[str]:
        """requestIds with notifications not yet published."""
        ...

    def drop_from_outbox(self, request_id: str, sent: list[dict[str, Any]]) -> None:
        """Forget notifications once published."""
        ...

    def with_pending_cancels(self) -> list[str]:
        """requestIds with Vertex jobs whose cancel Vertex has not confirmed yet."""
        ...


class CheckpointStore(Protocol):
    """Where training writes checkpoints (GCS)."""

    def latest(self, prefix_uri: str, *, not_before: datetime | None = None) -> Checkpoint | None:
        """The latest complete checkpoint under ``prefix_uri``, or None; checkpoints older
        than ``not_before`` (another run's, in a reused directory) are ignored."""
        ...


class JobBackend(Protocol):
    """Vertex AI: where jobs run."""

    def find(
        self, request_label: str, attempt: int, location: str, kind: str | None = None
    ) -> list[VertexJob]:
        """Every job of this request and attempt already created in ``location``, looked up
        by its labels (usually none or one; more only after a create raced).

        ``kind`` (the request kind) narrows the lookup; None searches every training kind.
        """
        ...

    def create(self, request: JobRequest, labels: Mapping[str, str], location: str) -> VertexJob:
        """Create the job of one attempt."""
        ...

    def get(self, name: str) -> VertexJob:
        """Read one job's authoritative state."""
        ...

    def list_labelled(
        self, location: str, created_since: datetime | None = None
    ) -> Iterable[VertexJob]:
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


class DeploymentStore(Protocol):
    """The deployment records (Firestore ``deployments``)."""

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claim:
        """Create the record in ACCEPTED, or report the existing one; see :class:`Claim`.

        Raises:
            SubmissionInProgress: another live claim holds the request.
            StoreUnavailable: Firestore could not be reached.
        """
        ...

    def record_operation(self, token: str, request_id: str, operation: str, now: datetime) -> None:
        """Record the DeployModel operation: the record is DEPLOYING and the claim is dropped."""
        ...

    def record_adopted(
        self, token: str, request_id: str, deployed_model_id: str, now: datetime
    ) -> None:
        """Record a deployment found already on the endpoint: DEPLOYED, claim dropped."""
        ...

    def record_failure(self, request_id: str, reason: str, now: datetime) -> None:
        """Mark a request FAILED for good (Vertex refused it), keeping the reason; never
        overwrites DEPLOYED or FAILED (see :func:`~shared.domain.deployments.deploy_failed`)."""
        ...

    def release(self, request_id: str, token: str, now: datetime) -> None:
        """Give up a claim this delivery holds, so a redelivery need not wait for its TTL."""
        ...

    def get(self, request_id: str) -> dict[str, Any] | None:
        """The record as stored, or None."""
        ...

    def deploying(self) -> list[dict[str, Any]]:
        """Every record in DEPLOYING (its operation not yet seen done)."""
        ...

    def park(self, request_id: str, now: datetime, delay_seconds: float, detail: str) -> None:
        """Park a deployment Vertex refused for quota (see
        :func:`~shared.domain.deployments.deploy_parked`), dropping its claim."""
        ...

    def parked_due(self, now: datetime) -> list[dict[str, Any]]:
        """Every parked record whose next deployment is due."""
        ...

    def apply_operation(
        self, request_id: str, status: OperationStatus, now: datetime
    ) -> str | None:
        """Move the record to what its operation says, in one transaction; the new state."""
        ...


class DeploymentBackend(Protocol):
    """Vertex AI EndpointService: where models are deployed for prediction."""

    def find(self, endpoint: str, request_id: str) -> str | None:
        """The id of this request's model already deployed on ``endpoint``, or None."""
        ...

    def deploy(self, request: JobRequest) -> str:
        """Start DeployModel for the request; returns the operation's name."""
        ...

    def operation(self, name: str) -> OperationStatus:
        """Read one DeployModel operation."""
        ...
