"""The service layer: each handler takes a command and the ports it needs, nothing else."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.commands import CancelJob, SubmitJob
from shared.config import Settings
from shared.deployments import Deployments, submit_deployment
from shared.domain.attempts import attempt_spec
from shared.domain.deployments import KIND as DEPLOY_KIND
from shared.domain.ids import label_value
from shared.domain.jobs import JobState
from shared.domain.recovery import cancel_requested, cancelled
from shared.domain.request import (
    KINDS,
    JobRequest,
    decode_message,
    parse_request,
    read_request_id,
)
from shared.errors import BackendRejected, FieldError, InvalidRequest
from shared.logs import get_logger, request_context
from shared.ports import JobBackend, JobStore, Notifier, RejectionLog, Submission

log = get_logger("intake")

EXCERPT_CHARS = 2048
LABEL_REQUEST = "flexjobs-request"
LABEL_ATTEMPT = "flexjobs-attempt"

Validator = Callable[[JobRequest], list[FieldError]]


class Outcome(StrEnum):
    """What became of one delivery."""

    SUBMITTED = "submitted"
    ADOPTED = "adopted"  # the job existed already (created before a crash), now recorded
    DUPLICATE = "duplicate"
    REJECTED = "rejected"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass
class Intake:
    """Ports and policy for :func:`submit_job`, wired once per instance by the bootstrap."""

    settings: Settings
    store: JobStore
    backend: JobBackend
    rejections: RejectionLog
    notifier: Notifier
    validators: Sequence[Validator]
    clock: Callable[[], datetime]
    # Spot deployments (``deployModel``); None where an instance takes no deployments.
    deployments: Deployments | None = None


def labels_for(request_id: str, attempt: int) -> dict[str, str]:
    """The Vertex labels that identify one attempt of one request (the idempotency key)."""
    return {LABEL_REQUEST: label_value(request_id), LABEL_ATTEMPT: str(attempt)}


def read_body(cmd: SubmitJob, intake: Intake) -> dict[str, Any]:
    """Decode a delivered message into a JSON object, within the size limit.

    Raises:
        InvalidRequest: the message is too large, not UTF-8, not JSON or not an object.
    """
    data = cmd.message.data
    limit = intake.settings.max_message_bytes
    if len(data) > limit:
        raise InvalidRequest(
            [FieldError("$", f"message is {len(data)} bytes; the limit is {limit} bytes")]
        )
    return decode_message(data)


def read_job_request(cmd: SubmitJob, intake: Intake, body: dict[str, Any]) -> JobRequest:
    """Parse and validate a decoded request, collecting every problem.

    Raises:
        InvalidRequest: with all the problems found; the message can never succeed.
    """
    request = parse_request(body, cmd.message.attributes, cmd.message.message_id)
    errors = [error for validate in intake.validators for error in validate(request)]
    if errors:
        raise InvalidRequest(errors)
    return request


def submit_job(cmd: SubmitJob, intake: Intake) -> Outcome:
    """Submit attempt 1 of a request exactly once, however often it is delivered.

    A bad request is acknowledged and recorded as a rejection; transient faults raise so that
    Pub/Sub redelivers. The claim serialises concurrent deliveries; the label lookup before
    create covers a function that died after Vertex created the job but before the record.
    """
    try:
        body = read_body(cmd, intake)
        if is_cancel(body):
            return cancel_job(CancelJob(request_id=str(body["cancel"])), intake)
        request = read_job_request(cmd, intake, body)
    except InvalidRequest as err:
        reject(cmd, err, intake)
        return Outcome.REJECTED
    with request_context(request.request_id):
        if request.kind == DEPLOY_KIND:
            return Outcome(submit_deployment(request, _deployments_of(intake)).value)
        now = intake.clock()
        claim = intake.store.claim(request, now, intake.settings.claim_ttl_seconds)
        if claim.token is None:
            log.info("duplicate delivery: already submitted", extra={"fields": _brief(claim)})
            return Outcome.DUPLICATE
        location = request.location or intake.settings.location
        attempt = AttemptPlan(attempt=1, strategy=request.strategy, location=location)
        try:
            return submit_attempt(
                request,
                claim.token,
                attempt,
                store=intake.store,
                backend=intake.backend,
                clock=intake.clock,
            )
        except BackendRejected as exc:
            intake.store.record_failure(request.request_id, str(exc), intake.clock())
            log.error("Vertex AI refused the job", extra={"fields": {"reason": str(exc)}})
            return Outcome.FAILED
        except Exception:
            # Like an idempotency record deleted on failure: let the redelivery run at once
            # instead of waiting out the claim. A process that dies cannot get here; its
            # claim expires after the TTL instead.
            intake.store.release(request.request_id, claim.token, intake.clock())
            raise


@dataclass(frozen=True)
class AttemptPlan:
    """Where and how one attempt runs, and what it resumes from."""

    attempt: int
    strategy: str
    location: str
    resume_from: str | None = None
    record_extra: dict[str, Any] = field(default_factory=dict)


def submit_attempt(
    request: JobRequest,
    token: str,
    plan: AttemptPlan,
    *,
    store: JobStore,
    backend: JobBackend,
    clock: Callable[[], datetime],
) -> Outcome:
    """Create (or adopt) the Vertex job of one attempt and record it, exactly once.

    The attempt's labels are its idempotency key: a job found under them was created by a
    delivery that died before recording it, and is adopted rather than created again.

    Raises:
        BackendRejected: Vertex refused the body for good.
        TransientError: any fault that redelivery may cure.
    """
    labels = labels_for(request.request_id, plan.attempt)
    job = backend.find(labels[LABEL_REQUEST], plan.attempt, plan.location, kind=request.kind)
    outcome = Outcome.ADOPTED if job else Outcome.SUBMITTED
    if job is None:
        body = attempt_spec(
            request.kind,
            request.spec,
            run_id=label_value(request.request_id),
            attempt=plan.attempt,
            resume_from=plan.resume_from,
            strategy=plan.strategy,
        )
        job = backend.create(replace(request, spec=body), labels, plan.location)
    submission = Submission(
        request_id=request.request_id,
        attempt=plan.attempt,
        vertex_job=job,
        strategy=plan.strategy,
        location=plan.location,
        resumed_from=plan.resume_from,
        record_extra=plan.record_extra,
    )
    if not store.record_submission(token, submission, clock()):
        # Cancelled while this attempt was being created: do not leave the job running.
        backend.cancel(job.name)
        log.info(
            "request cancelled during submission; job cancelled",
            extra={"fields": {"vertexJob": job.name}},
        )
        return Outcome.CANCELLED
    log.info(
        f"attempt {plan.attempt} {outcome.value}",
        extra={
            "fields": {
                "vertexJob": job.name,
                "strategy": plan.strategy,
                "resumeFrom": plan.resume_from,
            }
        },
    )
    return outcome


def is_cancel(body: dict[str, Any]) -> bool:
    """``{"cancel": "<requestId>"}`` on the requests topic cancels that request."""
    return "cancel" in body and not any(kind in body for kind in KINDS)


def cancel_job(cmd: CancelJob, intake: Intake) -> Outcome:
    """Cancel a request: its current Vertex job, and every retry that would follow.

    The record is first marked ``cancelRequested`` (so no retry can start), then Vertex is
    asked to cancel, then the record becomes CANCELLED; a redelivery after a fault in between
    repeats the missing steps.

    Raises:
        InvalidRequest: the cancel names no request flexjobs knows.
    """
    if not cmd.request_id:
        raise InvalidRequest([FieldError("cancel", "must be a non-empty requestId")])
    with request_context(cmd.request_id):
        record = intake.store.get(cmd.request_id)
        if record is None:
            raise InvalidRequest([FieldError("cancel", f"no request {cmd.request_id!r} is known")])
        if JobState(record["state"]).terminal:
            log.info(f"cancel ignored: the request is already {record['state']}")
            return Outcome.DUPLICATE
        intake.store.transact(cmd.request_id, lambda rec: cancel_requested(rec, intake.clock()))
        if record.get("vertexJob") and record["state"] != JobState.RETRYING.value:
            try:
                intake.backend.cancel(str(record["vertexJob"]))
            except BackendRejected as exc:
                # FAILED_PRECONDITION: the job ended already; the record still becomes CANCELLED.
                log.info(f"Vertex did not cancel: {exc}")
        intake.store.transact(cmd.request_id, lambda rec: cancelled(rec, intake.clock()))
        flush_outbox(cmd.request_id, intake.store, intake.notifier)
        log.info("request cancelled", extra={"fields": {"vertexJob": record.get("vertexJob")}})
        return Outcome.CANCELLED


def flush_outbox(request_id: str, store: JobStore, notifier: Notifier) -> int:
    """Publish a record's pending notifications, then forget them; returns how many."""
    record = store.get(request_id) or {}
    pending = list(record.get("outbox") or [])
    for message in pending:
        notifier.notify(message)
    if pending:
        store.drop_from_outbox(request_id, pending)
    return len(pending)


def _brief(claim: Any) -> dict[str, Any]:
    record = claim.record or {}
    return {"vertexJob": record.get("vertexJob"), "state": record.get("state")}


def reject(cmd: SubmitJob, err: InvalidRequest, intake: Intake) -> None:
    """Record a refused request and tell upstream, so nothing is lost."""
    message = cmd.message
    request_id = _readable_request_id(message.data, message.attributes, message.message_id)
    excerpt = message.data[:EXCERPT_CHARS].decode("utf-8", errors="replace")
    errors = [e.to_dict() for e in err.errors]
    with request_context(request_id):
        intake.rejections.record(
            request_id,
            {
                "requestId": request_id,
                "messageId": message.message_id,
                "errors": errors,
                "source": cmd.source,
                "receivedAt": intake.clock(),
                "payloadExcerpt": excerpt,
                "payloadBytes": len(message.data),
            },
        )
        intake.notifier.notify(
            {
                "requestId": request_id,
                "state": "REJECTED",
                "attempt": 0,
                "reason": str(err),
                "errors": errors,
            }
        )
        log.warning("request rejected", extra={"fields": {"errors": errors}})


def _readable_request_id(data: bytes, attributes: dict[str, str], message_id: str) -> str:
    """The requestId when one can be read from the message at all, else the message id."""
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        # Undecodable: fall back to what the transport says about the message.
        return attributes.get("requestId") or message_id
    if isinstance(body, dict):
        return read_request_id(body, attributes, message_id)
    return attributes.get("requestId") or message_id


def _deployments_of(intake: Intake) -> Deployments:
    if intake.deployments is None:
        # A wiring mistake, not bad input: raise so the message is redelivered once fixed.
        raise RuntimeError("this instance takes no deployModel requests: Intake.deployments")
    return intake.deployments
