"""Cancelling a request so that the cancel wins every race, and cancelling strays until
Vertex confirms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shared.commands import CancelJob
from shared.domain.ids import LABEL_REQUEST, labels_for
from shared.domain.jobs import Change, JobState, VertexJob, from_vertex
from shared.domain.records import next_placement, tombstone
from shared.domain.recovery import (
    cancel_requested,
    cancelled,
    cancels_pending,
)
from shared.errors import (
    BackendUnavailable,
    FieldError,
    InvalidRequest,
    SubmissionInProgress,
)
from shared.exactly_once import Outcome
from shared.logs import get_logger, request_context
from shared.submission import drive_cancels, flush_outbox, settle_record

if TYPE_CHECKING:
    from shared.intake import Intake

log = get_logger("cancel")


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
