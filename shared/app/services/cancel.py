"""Cancelling a request so that the cancel wins every race, and cancelling strays until
Vertex confirms."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.app.commands import Outcome
from shared.app.context import CapacityPorts
from shared.app.services import admission
from shared.app.services.admission import submit_admitted
from shared.app.services.deploy import cancel_deployment
from shared.app.steps.cancels import drive_cancels
from shared.app.steps.outbox import apply_and_notify, flush_outbox
from shared.domain.decisions.recovery import cancel_now, cancel_requested
from shared.domain.decisions.submissions import TOMBSTONE_REASON, next_placement, tombstone
from shared.domain.model.ids import LABEL_REQUEST, labels_for
from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState, from_vertex
from shared.domain.model.vertex_jobs import VertexJob
from shared.kernel.errors import (
    BackendUnavailable,
    FieldError,
    InvalidRequest,
    SubmissionInProgress,
)
from shared.kernel.logs import get_logger, request_context

if TYPE_CHECKING:
    from shared.app.context import Intake

log = get_logger("cancel")


def cancel_request(request_id: str, intake: Intake) -> Outcome:
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
    if not request_id:
        raise InvalidRequest([FieldError("cancel", "must be a non-empty requestId")])
    store, clock = intake.jobs, intake.clock
    with request_context(request_id):
        # The mark and the read are one transaction: what is decided below is the record
        # as it stands with the cancel marked, so no submission recorded after can start.
        marked = store.write(request_id, lambda rec: cancel_requested(rec, clock()))
        if marked is None:
            if intake.deployments is not None and intake.deployments.records.get(request_id):
                # A deployment's cancel takes it down (its fallback first).
                return cancel_deployment(request_id, intake.deployments)
            if store.create_tombstone(request_id, tombstone(request_id, clock())):
                log.info("cancel for a request not seen yet: tombstone left")
                # A deployModel request may have recorded its deployment since the read
                # above (it looks for this tombstone after, as this looks for it after the
                # tombstone): it goes. Before anything else can fail.
                if intake.deployments is not None and intake.deployments.records.get(request_id):
                    cancel_deployment(request_id, intake.deployments)
                flush_outbox(request_id, store, intake.notifier)
                return Outcome.CANCELLED
            # The request arrived between the read and the tombstone: decide on its record.
            raise SubmissionInProgress("the request arrived while its cancel was handled")
        record = marked.record
        deployments = intake.deployments
        if (
            record.reason == TOMBSTONE_REASON
            and deployments is not None
            and deployments.records.get(request_id)
        ):
            # This cancel's tombstone, left by an earlier delivery that failed after it: the
            # deployment recorded meanwhile goes, as that delivery would have done.
            return cancel_deployment(request_id, deployments)
        if record.state.terminal:
            left = drive_cancels(intake, request_id, list(record.pending_cancels))
            if left:
                raise BackendUnavailable(f"Vertex has not confirmed the cancel of {left}")
            log.info(f"cancel ignored: the request is already {record.state.value}")
            return Outcome.DUPLICATE
        if record.claim is not None and record.claim.live(clock()):
            # A submission is in flight: it will see cancelRequested and cancel its own job;
            # if it died, its job is found by label once its claim expires (by this cancel's
            # redelivery, or by the tick: see finish_cancel).
            raise SubmissionInProgress("a submission is in flight; the cancel follows it")
        left = finish_cancel(intake, record)
        if left:
            raise BackendUnavailable(f"Vertex has not confirmed the cancel of {left}")
        return Outcome.CANCELLED


def finish_cancel(ports: CapacityPorts, record: JobRecord) -> list[str]:
    """End a request whose cancel was asked for (``cancelRequested``), with no live claim on
    it: every live job of its current and next attempt, recorded or not, kept pending until
    Vertex confirms, and the record CANCELLED with its notification. Returns the jobs whose
    cancel Vertex has not confirmed yet (they stay pending, for the tick).

    The cancel message runs this; so does the tick, for a record whose cancel was marked
    while a dead delivery's claim held it and whose message never came again.
    """
    request_id = record.request_id
    names = _live_jobs(ports, record)
    apply_and_notify(ports, request_id, lambda rec: cancel_now(rec, names, ports.clock()))
    if ports.queues is not None and not names:
        # No job of it lives in Vertex (it was waiting, or admitted and not yet created): its
        # GPUs are free now; give them back and admit what now fits. A live job keeps them
        # until Vertex has ended it (CANCELLING still holds them): the tick gives them back
        # then (holds_quota).
        queues = ports.queues
        admission.release(ports, queues, [request_id], lambda rid: submit_admitted(ports, rid))
    left = drive_cancels(ports, request_id, names)
    log.info("request cancelled", extra={"fields": {"vertexJobs": names, "pending": left}})
    return left


def _live_jobs(intake: CapacityPorts, record: JobRecord) -> list[str]:
    """Every live Vertex job of the record's current and next attempt, recorded or not.

    The current attempt is looked for where it runs, the next one where its retry would
    create it (a fallback rung or AUTO's region rule may move it to another location), and
    both in every location the record used.
    """
    names: list[str] = []
    if record.vertex_job and record.state is not JobState.RETRYING:
        names.append(record.vertex_job)
    attempt = record.attempt or 1
    here = record.location or intake.settings.location
    later = next_placement(record, intake.settings.location).location if record.kind else here
    # And every location the request used or chose (locationsUsed, bounded): an attempt
    # whose create timed out in a region the job has since left may have landed there.
    places = dict.fromkeys((here, later, *record.locations_used))
    for number in (attempt, attempt + 1):
        labels = labels_for(record.request_id, number)
        for location in places:
            found = intake.backend.find(labels[LABEL_REQUEST], number, location, kind=record.kind)
            names += [job.name for job in found if not _ended(job)]
    return list(dict.fromkeys(names))


def _ended(job: VertexJob) -> bool:
    state = from_vertex(job.state)
    return state is not None and state.terminal
