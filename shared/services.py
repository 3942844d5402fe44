"""The service layer: each handler takes a command and the ports it needs, nothing else."""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from shared.commands import CancelJob, SubmitJob
from shared.config import Settings
from shared.deployments import Deployments, submit_deployment
from shared.domain.attempts import attempt_spec
from shared.domain.deployments import KIND as DEPLOY_KIND
from shared.domain.ids import label_value
from shared.domain.jobs import Change, JobState, VertexJob, adoptable, from_vertex
from shared.domain.records import next_placement, tombstone, tombstone_claimed
from shared.domain.recovery import (
    cancel_requested,
    cancelled,
    cancels_confirmed,
    cancels_pending,
    failed,
    parked,
)
from shared.domain.request import (
    KINDS,
    JobRequest,
    decode_message,
    parse_request,
    read_request_id,
)
from shared.domain.retry import backoff_seconds
from shared.domain.validation import Validator
from shared.domain.values import clip
from shared.errors import (
    BackendRejected,
    BackendUnavailable,
    FieldError,
    FlexjobsError,
    InvalidRequest,
    QuotaExhausted,
    SubmissionInProgress,
)
from shared.exactly_once import Creation, Outcome, create_once
from shared.logs import get_logger, request_context
from shared.ports import Claim, JobBackend, JobStore, Notifier, RejectionLog, Submission

__all__ = ["Intake", "Outcome", "cancel_job", "submit_attempt", "submit_job"]

log = get_logger("intake")

EXCERPT_BYTES = 2048
#: A rejection keeps at most this many errors (plus their total), so it always fits.
MAX_REJECTION_ERRORS = 100
LABEL_REQUEST = "flexjobs-request"
LABEL_ATTEMPT = "flexjobs-attempt"


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
    # Jitter of the backoff of a create parked for quota.
    rand: Callable[[], float] = random.random

    def backoff(self, retry_number: int) -> float:
        """Seconds before a parked submission is tried again (full jitter, capped)."""
        s = self.settings
        return backoff_seconds(
            retry_number, s.backoff_base_seconds, s.backoff_cap_seconds, self.rand
        )


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
    Pub/Sub redelivers. See :mod:`shared.exactly_once` for the guarantee.
    """
    try:
        body = read_body(cmd, intake)
        if is_cancel(body):
            return cancel_job(CancelJob(request_id=_cancel_target(body)), intake)
        request = read_job_request(cmd, intake, body)
    except InvalidRequest as err:
        reject(cmd, err, intake)
        return Outcome.REJECTED
    with request_context(request.request_id):
        if request.kind == DEPLOY_KIND:
            return submit_deployment(request, _deployments_of(intake))
        existing: list[Claim] = []

        def claim() -> str | None:
            taken = intake.store.claim(request, intake.clock(), intake.settings.claim_ttl_seconds)
            if taken.token is None:
                existing.append(taken)
            return taken.token

        location = request.location or intake.settings.location
        plan = AttemptPlan(attempt=1, strategy=request.strategy, location=location)
        outcome = submit_attempt(request, plan, claim, intake)
        if existing:
            return _already_claimed(request, existing[0], intake)
        return outcome


def _already_claimed(request: JobRequest, claim: Claim, intake: Intake) -> Outcome:
    """A delivery that found its request's record: a duplicate, or a cancel came first."""
    record = claim.record or {}
    fields = tombstone_claimed(record, request, intake.settings.location, intake.clock())
    if fields is not None:
        # The cancel arrived first (Pub/Sub keeps no order): record what was cancelled.
        intake.store.transact(
            request.request_id, lambda rec: Change(JobState(rec["state"]), fields)
        )
        log.info("request arrived after its cancel: nothing created")
        return Outcome.CANCELLED
    brief = {"vertexJob": record.get("vertexJob"), "state": record.get("state")}
    log.info("duplicate delivery: already submitted", extra={"fields": brief})
    return Outcome.DUPLICATE


@dataclass(frozen=True)
class Prepared:
    """What an attempt resumes from, and extra record fields; computed once it is claimed."""

    resume_from: str | None = None
    record_extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptPlan:
    """Where and how one attempt runs; ``prepare`` runs after the claim (it may do I/O)."""

    attempt: int
    strategy: str
    location: str
    prepare: Callable[[], Prepared] = Prepared


class AttemptPorts(Protocol):
    """What creating an attempt needs: both :class:`Intake` and the lifecycle's Tracker."""

    @property
    def store(self) -> JobStore: ...

    @property
    def backend(self) -> JobBackend: ...

    @property
    def notifier(self) -> Notifier: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    def backoff(self, retry_number: int) -> float: ...


def submit_attempt(
    request: JobRequest, plan: AttemptPlan, claim: Callable[[], str | None], ports: AttemptPorts
) -> Outcome:
    """Create (or adopt) the Vertex job of one attempt and record it, exactly once.

    The attempt's labels are its idempotency key: a job found under them was created by a
    delivery that died before recording it, and is adopted rather than created again.

    Raises:
        TransientError: any fault that redelivery may cure.
    """
    request_id = request.request_id
    labels = labels_for(request_id, plan.attempt)
    store, backend, clock = ports.store, ports.backend, ports.clock
    prepared = functools.cache(plan.prepare)

    def find() -> VertexJob | None:
        found = backend.find(labels[LABEL_REQUEST], plan.attempt, plan.location, request.kind)
        return adoptable(found)

    def create() -> VertexJob:
        body = attempt_spec(
            request.kind,
            request.spec,
            run_id=label_value(request_id),
            attempt=plan.attempt,
            resume_from=prepared().resume_from,
            strategy=plan.strategy,
        )
        return backend.create(replace(request, spec=body), labels, plan.location)

    def record(token: str, job: VertexJob, adopted: bool) -> Outcome:
        submission = Submission(
            request_id=request_id,
            attempt=plan.attempt,
            vertex_job=job,
            strategy=plan.strategy,
            location=plan.location,
            resumed_from=prepared().resume_from,
            record_extra=prepared().record_extra,
        )
        if not store.record_submission(token, submission, clock()):
            # Cancelled meanwhile, or another job holds this attempt: no record will ever
            # follow this job, so it must not keep running.
            cancel_until_confirmed(ports, request_id, [job.name])
            store.release(request_id, token, clock())
            log.info("job cancelled: the record will not take it", extra=_job_fields(job))
            return Outcome.CANCELLED
        outcome = Outcome.ADOPTED if adopted else Outcome.SUBMITTED
        log.info(f"attempt {plan.attempt} {outcome.value}", extra=_job_fields(job, plan))
        return outcome

    def release(token: str) -> None:
        store.release(request_id, token, clock())

    def refused(token: str, exc: BackendRejected) -> Outcome:
        reason = f"attempt {plan.attempt} refused by Vertex AI: {exc}"
        settle_record(ports, request_id, lambda rec: failed(rec, clock(), reason))
        release(token)
        return Outcome.FAILED

    def park(token: str, exc: QuotaExhausted) -> Outcome:
        def decide(rec: dict[str, Any]) -> Change | None:
            delay = ports.backoff(int(rec.get("quotaRetries") or 0) + 1)
            return parked(rec, clock(), plan.attempt, delay, str(exc))

        store.transact(request_id, decide)
        release(token)
        return Outcome.PARKED

    return create_once(Creation(claim, find, create, record, release, refused, park))


def _job_fields(job: VertexJob, plan: AttemptPlan | None = None) -> dict[str, Any]:
    fields: dict[str, Any] = {"vertexJob": job.name}
    if plan is not None:
        fields.update(strategy=plan.strategy, location=plan.location)
    return {"fields": fields}


def settle_record(
    ports: AttemptPorts, request_id: str, decide: Callable[[dict[str, Any]], Change | None]
) -> Change | None:
    """Apply one change to a record, then publish the notifications it queued."""
    change = ports.store.transact(request_id, decide)
    if change is not None and change.record.get("outboxPending"):
        flush_outbox(request_id, ports.store, ports.notifier)
    return change


def is_cancel(body: dict[str, Any]) -> bool:
    """``{"cancel": "<requestId>"}`` on the requests topic cancels that request."""
    return "cancel" in body and not any(kind in body for kind in KINDS)


def _cancel_target(body: dict[str, Any]) -> str:
    target = body.get("cancel")
    if not isinstance(target, str) or not target.strip():
        raise InvalidRequest([FieldError("cancel", "must be a non-empty requestId string")])
    return target


def cancel_job(cmd: CancelJob, intake: Intake) -> Outcome:
    """Cancel a request: every Vertex job of it, and every attempt that would follow.

    The cancel wins every race:

    - it marks ``cancelRequested`` and reads the record in one transaction, so it decides on
      what is stored now, and no submission recorded after it can start (the creator cancels
      its own job instead);
    - while another delivery holds a live submission claim, it raises, so Pub/Sub redelivers
      it once that submission is recorded or its claim expires;
    - it looks the attempt's jobs up by their labels, so a job created by a delivery that died
      before recording it is cancelled too;
    - every job to cancel is kept on the record until Vertex confirms (``pendingCancels``):
      a failed cancel raises for redelivery, and the tick retries it too;
    - a cancel for a requestId not seen yet leaves a tombstone, so the request, if it comes,
      creates nothing.

    Raises:
        InvalidRequest: the cancel names no requestId.
        TransientError: Vertex did not confirm every cancel yet, or a submission is in flight.
    """
    if not cmd.request_id:
        raise InvalidRequest([FieldError("cancel", "must be a non-empty requestId")])
    request_id = cmd.request_id
    store, clock = intake.store, intake.clock
    with request_context(request_id):
        seen: dict[str, Any] = {}

        def mark(rec: dict[str, Any]) -> Change | None:
            seen.clear()
            seen.update(rec)
            return cancel_requested(rec, clock())

        store.transact(request_id, mark)
        if not seen:
            if intake.deployments is not None and intake.deployments.store.get(request_id):
                raise InvalidRequest(
                    [
                        FieldError(
                            "cancel",
                            f"{request_id!r} is a deployModel request; cancel applies to "
                            "training jobs (undeploy a model with UndeployModel)",
                        )
                    ]
                )
            if store.create_tombstone(request_id, tombstone(request_id, clock())):
                flush_outbox(request_id, store, intake.notifier)
                log.info("cancel for a request not seen yet: tombstone left")
                return Outcome.CANCELLED
            # The request arrived between the read and the tombstone: decide on its record.
            raise SubmissionInProgress("the request arrived while its cancel was handled")
        record = seen
        if JobState(record["state"]).terminal:
            left = drive_cancels(intake, request_id, list(record.get("pendingCancels") or []))
            if left:
                raise BackendUnavailable(f"Vertex has not confirmed the cancel of {left}")
            log.info(f"cancel ignored: the request is already {record['state']}")
            return Outcome.DUPLICATE
        held = (record.get("claim") or {}).get("expiresAt")
        if held is not None and held > clock():
            # A submission is in flight: it will see cancelRequested and cancel its own job;
            # if it died, its job is found by label once its claim expires.
            raise SubmissionInProgress("a submission is in flight; the cancel follows it")
        names = _live_jobs(intake, record)

        def decide(rec: dict[str, Any]) -> Change | None:
            pending = cancels_pending(rec, names, clock())
            merged = {**rec, **(pending.record if pending else {})}
            done = cancelled(merged, clock())
            fields = {**(pending.record if pending else {}), **(done.record if done else {})}
            if not fields:
                return None
            return Change(JobState.CANCELLED, fields, done.attempt if done else {})

        settle_record(intake, request_id, decide)
        left = drive_cancels(intake, request_id, names)
        log.info("request cancelled", extra={"fields": {"vertexJobs": names, "pending": left}})
        if left:
            raise BackendUnavailable(f"Vertex has not confirmed the cancel of {left}")
        return Outcome.CANCELLED


def _live_jobs(intake: Intake, record: dict[str, Any]) -> list[str]:
    """Every live Vertex job of the record's current and next attempt, recorded or not.

    The current attempt is looked for where it runs, the next one where its retry would
    create it (a fallback rung may move it to another location).
    """
    names: list[str] = []
    if record.get("vertexJob") and record.get("state") != JobState.RETRYING.value:
        names.append(str(record["vertexJob"]))
    attempt = int(record.get("attempt") or 1)
    here = str(record.get("location") or intake.settings.location)
    later = (
        next_placement(record, intake.settings.location).location if record.get("kind") else here
    )
    kind = record.get("kind")
    for number, location in ((attempt, here), (attempt + 1, later)):
        labels = labels_for(str(record["requestId"]), number)
        found = intake.backend.find(labels[LABEL_REQUEST], number, location, kind=kind)
        names += [job.name for job in found if not _ended(job)]
    return list(dict.fromkeys(names))


def _ended(job: VertexJob) -> bool:
    state = from_vertex(job.state)
    return state is not None and state.terminal


def cancel_until_confirmed(ports: AttemptPorts, request_id: str, names: list[str]) -> list[str]:
    """Keep ``names`` on the record as pending cancels, then cancel them; returns those left."""
    if not names:
        return []
    ports.store.transact(request_id, lambda rec: cancels_pending(rec, names, ports.clock()))
    return drive_cancels(ports, request_id, names)


def drive_cancels(ports: AttemptPorts, request_id: str, names: list[str]) -> list[str]:
    """Ask Vertex to cancel each job; forget those it confirmed. Returns the ones left.

    A job that already ended counts as confirmed (the backend's cancel is idempotent); any
    other fault leaves the name pending, for the redelivery or the next tick.
    """
    confirmed: list[str] = []
    for name in names:
        try:
            ports.backend.cancel(name)
        except FlexjobsError as exc:
            log.warning(
                f"cancel not confirmed, kept pending: {exc}", extra={"fields": {"vertexJob": name}}
            )
            continue
        confirmed.append(name)
    if confirmed:
        ports.store.transact(
            request_id, lambda rec: cancels_confirmed(rec, confirmed, ports.clock())
        )
    return [n for n in names if n not in confirmed]


def flush_outbox(request_id: str, store: JobStore, notifier: Notifier) -> int:
    """Publish a record's pending notifications, then forget them; returns how many."""
    record = store.get(request_id) or {}
    pending = list(record.get("outbox") or [])
    for message in pending:
        notifier.notify(message)
    if pending:
        store.drop_from_outbox(request_id, pending)
    return len(pending)


def bounded_errors(errors: Sequence[FieldError]) -> list[dict[str, str]]:
    """At most :data:`MAX_REJECTION_ERRORS` errors, each path and message clipped."""
    return [
        {"path": clip(e.path) or "", "message": clip(e.message) or ""}
        for e in errors[:MAX_REJECTION_ERRORS]
    ]


def excerpt(data: bytes, limit: int = EXCERPT_BYTES) -> str:
    """The first ``limit`` bytes of a payload as text, at most ``limit`` bytes once encoded.

    Undecodable bytes become U+FFFD, which takes three bytes: the text is cut again after
    decoding, on a character boundary.
    """
    text = data[:limit].decode("utf-8", errors="replace")
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def reject(cmd: SubmitJob, err: InvalidRequest, intake: Intake) -> None:
    """Record a refused request and tell upstream, so nothing is lost."""
    message = cmd.message
    request_id = _readable_request_id(message.data, message.attributes, message.message_id)
    errors = bounded_errors(err.errors)
    with request_context(request_id):
        intake.rejections.record(
            request_id,
            {
                "requestId": request_id,
                "messageId": message.message_id,
                "errors": errors,
                "errorCount": len(err.errors),
                "source": cmd.source,
                "receivedAt": intake.clock(),
                "payloadExcerpt": excerpt(message.data),
                "payloadBytes": len(message.data),
            },
        )
        intake.notifier.notify(
            {
                "requestId": request_id,
                "state": "REJECTED",
                "attempt": 0,
                "reason": clip(str(err)),
                "errors": errors,
                "errorCount": len(err.errors),
            }
        )
        log.warning(
            "request rejected", extra={"fields": {"errors": errors[:10], "count": len(errors)}}
        )


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
