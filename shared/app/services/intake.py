"""Intake: one delivered request message becomes exactly one command, carried out once.

A message is decoded and validated into what it asks (:data:`~shared.app.commands.Asked`):
``{"cancel": id}`` is a :class:`~shared.app.commands.CancelJob`, a ``deployModel`` request a
:class:`~shared.app.commands.DeployModel`, any training kind a
:class:`~shared.app.commands.CreateJob`. :func:`submit` carries it out here, by the service of
each (the handlers of those commands, :mod:`shared.app.handlers`, call the same services). Bad
input is acknowledged and recorded as a rejection.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, assert_never

from shared.app.commands import (
    Asked,
    CancelJob,
    CreateJob,
    DeployModel,
    Outcome,
    ResumeServing,
    SubmitJob,
)
from shared.app.context import Deployments, Intake
from shared.app.ports import Claimed
from shared.app.services.admission import demand_for, enter_queue
from shared.app.services.cancel import cancel_request
from shared.app.services.deploy import (
    accept_deployment,
    advance,
    cancel_deployment,
    resume_deployment,
    start_deployment,
)
from shared.app.services.series import take_slot
from shared.app.steps.attempts import AttemptPlan, decided_plan, submit_attempt
from shared.domain.admission.config import Queues, read_queues
from shared.domain.admission.demand import admission_of
from shared.domain.admission.quota import Demand
from shared.domain.capacity.model import Situation, Tuning
from shared.domain.capacity.situations import situation_for_first_attempt
from shared.domain.decisions.submissions import TOMBSTONE_REASON, tombstone_claimed
from shared.domain.model.ids import check_request_id
from shared.domain.model.kinds import DEPLOY_MODEL
from shared.domain.model.records import JobRecord
from shared.domain.model.strategies import AUTO
from shared.domain.model.values import clip
from shared.domain.request.attempts import gpu_shape
from shared.domain.request.message import JobRequest, read_request_id
from shared.domain.request.reading import Cancel, Resume, read_message
from shared.kernel.errors import (
    FieldError,
    InvalidRequest,
    SubmissionInProgress,
    UnreadableInput,
)
from shared.kernel.events import Event, logged
from shared.kernel.logs import get_logger, request_context

log = get_logger("intake")

EXCERPT_BYTES = 2048
#: A rejection keeps at most this many errors (plus their total), so it always fits.
MAX_REJECTION_ERRORS = 100


#: The queues when admission is off: the implicit ``default`` alone.
NO_QUEUES = read_queues({})


def submit(cmd: SubmitJob, intake: Intake) -> Outcome:
    """Carry out one delivered request message: decode, validate, then what it asks.

    A bad request is acknowledged and recorded as a rejection; transient faults raise so that
    Pub/Sub redelivers.
    """
    try:
        asked = read_command(cmd, intake)
        match asked:
            case CancelJob(request_id=request_id):
                return cancel_request(request_id, intake)
            case ResumeServing(request_id=request_id):
                return resume(request_id, intake)
            case DeployModel(request=request):
                return deploy(request, intake)
            case CreateJob(request=request):
                return create(request, intake)
            case _:
                assert_never(asked)
    except InvalidRequest as err:
        reject(cmd, err, intake)
        return Outcome.REJECTED


def read_command(cmd: SubmitJob, intake: Intake) -> Asked:
    """The command a delivered message carries, read as every reader reads a message
    (:func:`~shared.domain.request.reading.read_message`).

    Raises:
        InvalidRequest: with every problem found; the message can never succeed.
    """
    message = cmd.message
    read = read_message(
        message.data,
        message.attributes,
        message.message_id,
        message.publish_time,
        max_bytes=intake.settings.max_message_bytes,
        validators=intake.validators,
        clock=intake.clock,
    )
    if isinstance(read, Cancel):
        return CancelJob(request_id=read.request_id)
    if isinstance(read, Resume):
        return ResumeServing(request_id=read.request_id)
    request = dataclasses.replace(read, origin={"source": cmd.source, **cmd.origin})
    return DeployModel(request) if request.kind == DEPLOY_MODEL.name else CreateJob(request)


def create(request: JobRequest, intake: Intake) -> Outcome:
    """Submit attempt 1 of a training request exactly once, however often it is delivered."""
    with request_context(request.request_id):
        # The queue and priority first, before a scheduled slot is taken. Admission off,
        # only the implicit default queue exists: a request naming another is refused
        # rather than run unqueued as if its queue's limits applied.
        options = request.options
        admission_of(intake.queues or NO_QUEUES, options.get("queue"), options.get("priority"), {})
        skipped = take_slot(request, intake)
        if skipped is not None:
            return skipped
        location = request.location or intake.settings.location
        plan = AttemptPlan(attempt=1, strategy=request.strategy, location=location)
        if request.strategy == AUTO:
            plan = decided_plan(1, location, _first_situation(request, intake))
        if intake.queues is not None:
            demand = demand_for(request, plan.strategy, location)
            if demand:  # a job with no GPUs holds no quota: never queued
                return _wait_for_admission(request, demand, intake, intake.queues)
        taken = intake.jobs.claim(request, intake.clock(), intake.settings.claim_ttl_seconds)
        if taken.token is None:  # another delivery's record: a duplicate, or its cancel
            return _already_claimed(request, taken, intake)
        return submit_attempt(request, plan, lambda: taken, intake)


def _wait_for_admission(
    request: JobRequest, demand: Demand, intake: Intake, queues: Queues
) -> Outcome:
    """Admission is on: the request waits in its queue, and is created once admitted
    (:mod:`shared.app.services.admission`); a duplicate finds its record as any delivery does."""
    entered = enter_queue(request, demand, intake, queues)
    if entered is not None:
        return entered
    found = intake.jobs.read(request.request_id)
    if found is None:  # deleted between the create and this read: redeliver
        raise SubmissionInProgress(f"request {request.request_id!r} record vanished")
    return _already_claimed(request, Claimed(record=dict(found.raw), stored=found), intake)


def _first_situation(request: JobRequest, intake: Intake) -> Situation | None:
    """What the capacity policy knows of an AUTO request's attempt 1: nothing done yet."""
    accelerator, _gpus = gpu_shape(request.kind, request.spec)
    now = intake.clock()
    return situation_for_first_attempt(
        request.options,
        accelerator,
        origin=request.published_at or now,
        now=now,
        prices=intake.prices,
        budgets=intake.retry.for_request(request.options.get("retryPolicy")).budgets,
        backoff=intake.retry.backoff,
        tuning=Tuning().scaled(intake.settings.auto_time_scale),
    )


def deploy(request: JobRequest, intake: Intake) -> Outcome:
    """Deploy a ``deployModel`` request on Spot VMs exactly once; not at all when its cancel
    came first (Pub/Sub keeps no order: the cancel left a tombstone under its requestId)."""
    request_id = request.request_id
    deployments = _deployments_of(intake)
    with request_context(request_id):
        if _tombstoned(request_id, intake):
            log.info("deployment cancelled before it arrived: nothing deployed")
            return Outcome.CANCELLED
        if not accept_deployment(request, deployments):
            # A redelivery (an earlier one may have failed before its DeployModel reached
            # Vertex): one more step, which sends nothing claimed already.
            log.info("duplicate delivery: the deployment is recorded already")
            advance(deployments, request_id)
            return Outcome.DUPLICATE
        # A cancel may have left its tombstone since the read above. It looks for this
        # record after writing its tombstone, as this looks for the tombstone after writing
        # the record: one of the two sees the other, and the deployment goes.
        if _tombstoned(request_id, intake):
            cancel_deployment(request_id, deployments)
            log.info("deployment cancelled as it arrived: nothing deployed")
            return Outcome.CANCELLED
    return start_deployment(request_id, deployments)


def _tombstoned(request_id: str, intake: Intake) -> bool:
    """A cancel came for this requestId before its request (its tombstone is there)."""
    earlier = intake.jobs.get(request_id)
    return earlier is not None and earlier.reason == TOMBSTONE_REASON


def resume(request_id: str, intake: Intake) -> Outcome:
    """Follow a deployment paused by a hand edit again (see :func:`resume_deployment`)."""
    return resume_deployment(request_id, _deployments_of(intake))


def _already_claimed(request: JobRequest, claim: Claimed, intake: Intake) -> Outcome:
    """A delivery that found its request's record: a duplicate, or a cancel came first."""
    record = JobRecord.decode(claim.record or {})
    location, now = intake.settings.location, intake.clock()
    if tombstone_claimed(record, request, location, now) is not None:
        # The cancel arrived first (Pub/Sub keeps no order): record what was cancelled.
        intake.jobs.apply(
            request.request_id, lambda rec: tombstone_claimed(rec, request, location, now)
        )
        log.info("request arrived after its cancel: nothing created")
        return Outcome.CANCELLED
    brief = {"vertexJob": record.vertex_job, "state": record.state.value}
    log.info("duplicate delivery: already submitted", extra={"fields": brief})
    return Outcome.DUPLICATE


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
    """Record a refused request and tell upstream, so nothing is lost.

    A redelivery of the same refused message (an upload redelivered for another line's
    transient fault) finds its rejection recorded already and notifies nothing again. The
    notification goes first: a recorded rejection always had its notification published.
    """
    message = cmd.message
    request_id = _readable_request_id(message.data, message.attributes, message.message_id)
    errors = bounded_errors(err.errors)
    document = {
        "requestId": request_id,
        "messageId": message.message_id,
        "errors": errors,
        "errorCount": len(err.errors),
        "source": cmd.source,
        **cmd.origin,
        "receivedAt": intake.clock(),
        "payloadExcerpt": excerpt(message.data),
        "payloadBytes": len(message.data),
    }
    with request_context(request_id):
        if _same_rejection(intake.rejections.get(request_id), document):
            log.info("rejection already recorded: nothing more to tell")
            return
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
        intake.rejections.record(request_id, document)
        # A refusal no check foresaw (reading_untrusted) logs its cause's traceback: bad input
        # it may be, or a bug that input reached.
        cause = err.__cause__ if isinstance(err, UnreadableInput) else None
        log.warning(
            "request rejected",
            extra=logged(Event.JOB_REJECTED, errors=errors[:10], count=len(errors)),
            exc_info=cause,
        )


def _same_rejection(stored: Mapping[str, Any] | None, document: Mapping[str, Any]) -> bool:
    """The same message refused for the same reasons (only the time differs)."""
    if stored is None:
        return False
    keys = (set(stored) | set(document)) - {"receivedAt"}
    return all(stored.get(key) == document.get(key) for key in keys)


def _readable_request_id(data: bytes, attributes: dict[str, str], message_id: str) -> str:
    """The requestId when one can be read from the message at all and is within bounds
    (a rejection and its notification carry it), else the message id."""
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        # Undecodable: fall back to what the transport says about the message.
        body = None
    found = (
        read_request_id(body, attributes, message_id)
        if isinstance(body, dict)
        else attributes.get("requestId") or message_id
    )
    return found if not check_request_id(found) else message_id


def _deployments_of(intake: Intake) -> Deployments:
    if intake.deployments is None:
        # A wiring mistake, not bad input: raise so the message is redelivered once fixed.
        raise RuntimeError("this instance takes no deployModel requests: Intake.deployments")
    return intake.deployments
