"""The service layer: each handler takes a command and the ports it needs, nothing else."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.commands import SubmitJob
from shared.config import Settings
from shared.domain.ids import label_value
from shared.domain.request import JobRequest, decode_message, parse_request, read_request_id
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


def labels_for(request_id: str, attempt: int) -> dict[str, str]:
    """The Vertex labels that identify one attempt of one request (the idempotency key)."""
    return {LABEL_REQUEST: label_value(request_id), LABEL_ATTEMPT: str(attempt)}


def read_job_request(cmd: SubmitJob, intake: Intake) -> JobRequest:
    """Decode, parse and validate a delivered message, collecting every problem.

    Raises:
        InvalidRequest: with all the problems found; the message can never succeed.
    """
    data = cmd.message.data
    limit = intake.settings.max_message_bytes
    if len(data) > limit:
        raise InvalidRequest(
            [FieldError("$", f"message is {len(data)} bytes; the limit is {limit} bytes")]
        )
    body = decode_message(data)
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
        request = read_job_request(cmd, intake)
    except InvalidRequest as err:
        reject(cmd, err, intake)
        return Outcome.REJECTED
    with request_context(request.request_id):
        now = intake.clock()
        claim = intake.store.claim(request, now, intake.settings.claim_ttl_seconds)
        if claim.token is None:
            log.info("duplicate delivery: already submitted", extra={"fields": _brief(claim)})
            return Outcome.DUPLICATE
        try:
            return _submit_claimed(request, claim.token, intake)
        except Exception:
            # Like an idempotency record deleted on failure: let the redelivery run at once
            # instead of waiting out the claim. A process that dies cannot get here; its
            # claim expires after the TTL instead.
            intake.store.release(request.request_id, claim.token, intake.clock())
            raise


def _submit_claimed(request: JobRequest, token: str, intake: Intake) -> Outcome:
    location = request.location or intake.settings.location
    labels = labels_for(request.request_id, 1)
    job = intake.backend.find(labels[LABEL_REQUEST], 1, location)
    outcome = Outcome.ADOPTED if job else Outcome.SUBMITTED
    if job is None:
        try:
            job = intake.backend.create(request, labels, location)
        except BackendRejected as exc:
            intake.store.record_failure(request.request_id, str(exc), intake.clock())
            log.error("Vertex AI refused the job", extra={"fields": {"reason": str(exc)}})
            return Outcome.FAILED
    submission = Submission(
        request_id=request.request_id,
        attempt=1,
        vertex_job=job,
        strategy=request.strategy,
        location=location,
    )
    intake.store.record_submission(token, submission, intake.clock())
    log.info(
        f"job {outcome.value}",
        extra={"fields": {"vertexJob": job.name, "strategy": request.strategy}},
    )
    return outcome


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
