"""Settling: one authoritative read of a job's state written on its record, and the retry that
makes due, from the latest complete checkpoint.

Every hint is only a hint: the state written is always the one read from Vertex. A failed or
timed-out Vertex read raises before anything is written, so a control-plane error never
changes a job's state and never starts a retry. The state hints
(:mod:`shared.app.services.track`) and the tick (:mod:`shared.app.services.tick`) both settle
through here.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from shared.app.commands import Outcome
from shared.app.context import Tracker
from shared.app.services import admission
from shared.app.services.cancel import finish_cancel
from shared.app.steps.attempts import Prepared, submit_due
from shared.app.steps.outbox import flush_outbox
from shared.domain.admission.ledger import Stage
from shared.domain.decisions.recovery import settle, work_lost_seconds
from shared.domain.decisions.submissions import (
    advances,
    checkpoints_under,
    pending_attempt,
    progress_fields,
)
from shared.domain.model.changes import Change
from shared.domain.model.checkpoint import Checkpoint
from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.policy.failures import FailureClass
from shared.kernel.events import Event, logged
from shared.kernel.logs import get_logger, request_context

log = get_logger("lifecycle")


def settle_current(
    tracker: Tracker, request_id: str, record: JobRecord | None = None
) -> str | None:
    """Read a record's current job from Vertex and settle the record on it; returns the
    record's new state when it changed. ``record``: as this delivery last read it (no read
    then); an ended record, or one with no job yet, reads nothing."""
    record = record if record is not None else tracker.jobs.get(request_id)
    if record is None or not record.vertex_job or record.state.terminal:
        return None
    job = tracker.backend.get(record.vertex_job)
    return settle_job(tracker, request_id, job, record)


def _settled(
    tracker: Tracker,
    request_id: str,
    job: VertexJob,
    now: datetime,
    known: JobRecord | None = None,
) -> tuple[Change | None, JobRecord | None]:
    """The record settled against one authoritative read of its job, and what the change
    queued published: the change (None when nothing changed) and the record after it."""
    written = tracker.jobs.write(
        request_id,
        lambda record: settle(record, job, now, tracker.retry, tracker.prices),
        known.stored if known is not None else None,
    )
    if written is None or written.change is None:
        # Nothing new to send; a notification a failed publish left behind is sent by the
        # tick, which flushes every pending outbox, so unchanged reads cost no extra read.
        return None, None if written is None else written.record
    change = written.change
    after = flush_outbox(request_id, tracker.jobs, tracker.notifier, written.record)
    fields = {
        "vertexJob": job.name,
        "vertexState": job.state,
        "reason": change.record.get("reason"),
        **_accounted(change),
    }
    record = written.record
    event = logged(
        Event.JOB_STATE_CHANGED,
        state=change.state.value,
        attempt=record.attempt,
        strategy=record.strategy,
        **fields,
    )
    log.info(f"job is {change.state.value}", extra=event)
    if fields.get("failureClass") == FailureClass.PREEMPTED:
        where = {"vertexJob": job.name, "attempt": record.attempt, "strategy": record.strategy}
        log.info("attempt preempted", extra=logged(Event.JOB_PREEMPTED, **where))
    return change, after


def _accounted(change: Change) -> dict[str, Any]:
    """What the attempt a change ends used and cost (its accounting by ``settle``), for the
    metrics; nothing when the change ends no attempt, so they count each attempt once."""
    spent = change.attempt
    if "gpuSeconds" not in spent:
        return {}
    cost = spent.get("cost") or {}
    return {
        "gpuSeconds": spent["gpuSeconds"],
        "queueSeconds": spent.get("queuedSeconds"),
        # Unpriced (no price for the accelerator): no cost, rather than a cost of 0.
        **({"costUsd": cost["costUsd"]} if "costUsd" in cost else {}),
        **({"failureClass": spent["errorClass"]} if "errorClass" in spent else {}),
    }


def settle_job(
    tracker: Tracker, request_id: str, job: VertexJob, known: JobRecord | None = None
) -> str | None:
    """Settle the record against one authoritative read of its job, publish what the change
    queued, then run at once a retry the settlement made due now (backoff 0), rather than
    leave it to the next tick. Returns the record's new state when it changed. ``known``: the
    record as this delivery last read or wrote it (no read then)."""
    now = tracker.clock()
    change, after = _settled(tracker, request_id, job, now, known)
    if change is None:
        return None
    due = change.record.get("nextAttemptAt")
    if change.state is JobState.RETRYING and due is not None and due <= now:
        run_retry(tracker, request_id, after)
    requeued = change.record.get("admission", {}).get("stage") == Stage.WAITING.value
    if (change.state.terminal or requeued) and tracker.queues is not None:
        # Its job ended (Vertex says so: this settles on its read), so its GPUs are free
        # again; or admission preempted it and it waits again: give them back and admit what
        # now fits, at once rather than at the next tick (which would also find the entry
        # orphaned and drop it).
        admission.release(tracker, tracker.queues, [request_id], submitter(tracker))
    return change.state.value


def submitter(tracker: Tracker) -> admission.Submit:
    """How the lifecycle creates an admitted request: as any due submission."""
    return lambda request_id: run_retry(tracker, request_id)


def run_retry(tracker: Tracker, request_id: str, known: JobRecord | None = None) -> Outcome | None:
    """Submit the next attempt of a request, from its latest complete checkpoint.

    That is attempt n+1 of a RETRYING request, or attempt n that Vertex refused for quota
    (parked). Exactly once, through :func:`shared.app.steps.exactly_once.create_once`. ``known``:
    the record as the settlement that made the retry due left it (no read then).
    """
    with request_context(request_id):
        record = known if known is not None else tracker.jobs.get(request_id)
        if record is not None and _cancel_left_behind(record, tracker.clock()):
            # Its cancel was marked while a dead delivery's claim held the record, and the
            # cancel message never came again: finish it here, or the job runs unfollowed.
            finish_cancel(tracker, record)
            return Outcome.CANCELLED
        attempt = pending_attempt(record) if record is not None else None
        if record is None or attempt is None:
            return None
        prepare = functools.partial(_prepare, tracker, request_id, record, attempt)
        return submit_due(tracker, record, attempt, prepare)


def _cancel_left_behind(record: JobRecord, now: datetime) -> bool:
    """A cancel asked for of a record still waiting for a submission, which nothing holds."""
    waiting = pending_attempt(record) is not None
    held = record.claim is not None and record.claim.live(now)
    return record.cancel_requested and waiting and not record.state.terminal and not held


def _prepare(tracker: Tracker, request_id: str, record: JobRecord, attempt: int) -> Prepared:
    """The checkpoint attempt ``attempt`` resumes from, and the work the previous one lost."""
    if attempt <= 1:
        return Prepared()  # a parked first attempt starts as intake would have started it
    latest = _latest_checkpoint(tracker, record)
    previous = tracker.jobs.get_attempt(request_id, attempt - 1) or {}
    lost = work_lost_seconds(previous, latest, previous.get("resumedFrom"))
    tracker.jobs.update_attempt(request_id, attempt - 1, {"workLostSeconds": lost})
    extra: dict[str, Any] = {"workLostSeconds": record.work_lost_seconds + lost}
    if latest is not None and advances(record.latest_checkpoint, latest):
        # An upload may have recorded a later one already (a listing stops at its bounds).
        extra.update(progress_fields(record.options, latest))
    ended = previous.get("endedAt")
    return Prepared(
        resume_from=latest.uri if latest else None,
        record_extra=extra,
        previous_ended_at=ended if isinstance(ended, datetime) else None,
    )


def _latest_checkpoint(tracker: Tracker, record: JobRecord) -> Checkpoint | None:
    """The latest complete checkpoint to resume from: the listing's, or the record's own
    ``latestCheckpoint`` when that is newer and its listing still confirms it.

    The listing is bounded (a prefix crowded with half-written or foreign step directories
    cuts it short), and a listing cut short must never resume from scratch, or from an older
    checkpoint, while the record names a newer complete one that still exists.
    """
    prefix = checkpoints_under(str(record.kind), record.request, record.options)
    if not prefix:
        return None
    # A reused output directory may hold another run's checkpoints: only this request's count,
    # unless the request named checkpointUri itself (resuming another run is then deliberate).
    not_before = None if record.options.get("checkpointUri") else record.created_at
    listed = tracker.checkpoints.latest(prefix, not_before=not_before)
    recorded = record.latest_checkpoint
    if recorded is None or (listed is not None and not advances(listed, recorded)):
        return listed
    confirmed = tracker.checkpoints.confirm(recorded)
    if confirmed is None:
        log.warning(
            "the record's latest checkpoint is gone: resuming from the listing's",
            extra={"fields": {"recorded": recorded.uri, "listed": listed.uri if listed else None}},
        )
        return listed
    return confirmed
